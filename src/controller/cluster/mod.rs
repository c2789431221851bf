//! The SlurmCluster controller: registers each `SlurmCluster`'s slurmrestd client (and poller; shared
//! by SlurmClusters with the same slurmrestd and credentials), and a status that says whether it
//! works.
//!
//! A thin driver over pure steps:
//!
//! 1. [`config::plan`]: check the spec alone (endpoint, TLS, auth method, bounds);
//! 2. read the referenced Secret (and CA Secret or ConfigMap) from the operator's credentials
//!    namespace: only Secrets labelled `slurm.rs/credentials=true` are used;
//! 3. [`config::ConfigPlan::build`]: check what was read, build client config and credentials;
//! 4. [`ClusterRegistry::upsert`](crate::state::registry::ClusterRegistry::upsert): a new client and
//!    poller, a running one shared with other SlurmClusters, or new credentials swapped into the
//!    running client (key rotation, no restart);
//! 5. check the cluster: identity through `/diag` (which also proves the credentials), partitions,
//!    node counts from the poller's index once it has synced (else one `nodes` call), and the
//!    poller's health;
//! 6. [`status::desired`] → server-side apply of the status when [`status::changed`], and an Event
//!    when `Ready` or `JobsListed` changes ([`status::notice`]).
//!
//! Failures of steps 1 and 3 are the user's to fix: the client is removed, the status says why,
//! and the controller waits for a change of the SlurmCluster or of a Secret/ConfigMap it references
//! (those are watched, metadata only). Failures of step 4 and 5 (unreachable, TLS, unauthorized,
//! ...) keep the registration (its poller notices the recovery) and requeue with a per-SlurmCluster
//! exponential backoff. Deletion runs behind the `slurm.rs/cleanup` finalizer: the client is
//! removed and its poller stops.
//!
//! Triggers: the SlurmCluster itself (generation and finalizer changes only — our own status writes do
//! not re-trigger), Secret and ConfigMap changes mapped to the Clusters that reference them, and
//! the pollers' `HealthChanged` and `ListingChanged` events.

pub mod config;
pub mod status;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Predicate, WatchStreamExt, predicates, watcher};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use self::config::{CaSource, ConfigError, ConfigPlan, Sources};
use self::status::{Connected, Failure, Observation};
use super::kit::{self, Backoffs};
use super::{Context, DeletedCluster, SLURMJOBS, SLURMNODESETS};
use crate::controller::kit::TouchedAfterRelist as _;
use crate::crd::{CREDENTIALS_LABEL, SlurmCluster, SlurmClusterSpec};
use crate::error_chain::Chain;
use crate::slurm::tag::TagKey;
use crate::slurm::types::{Changes, ClusterInfo, NodeCounts};
use crate::slurm::{SlurmClient, SlurmError};
use crate::state::index::{Health, SlurmEvent};
use crate::state::registry::{ClusterHandle, ClusterRegistry, Upserted};

/// The controller's name in metrics and logs.
pub const CONTROLLER: &str = "cluster";

/// A working SlurmCluster is checked again this often (status counts, identity, last contact).
pub const RESYNC: Duration = Duration::from_secs(60);

/// Event `action` for everything this controller reports.
const EVENT_ACTION: &str = "CheckConnection";

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the SlurmCluster's configuration is unusable")]
    InvalidConfig(#[source] ConfigError),
    #[error("cannot read Secret {name:?}")]
    ReadSecret {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot read ConfigMap {name:?}")]
    ReadConfigMap {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot create the slurmrestd client")]
    CreateClient(#[source] SlurmError),
    #[error("checking the cluster through slurmrestd failed")]
    CheckCluster {
        #[source]
        source: SlurmError,
        /// Whether the credentials were accepted before the failure.
        authenticated: bool,
    },
    #[error("the cluster's poller reports slurmrestd down ({reason}): {message}")]
    PollerDown {
        reason: &'static str,
        message: String,
    },
    #[error("slurmrestd answers, but its slurmctld does not respond")]
    ControllerNotResponding,
    #[error("cannot apply the SlurmCluster's status")]
    PatchStatus(#[source] kube::Error),
    #[error("cannot add the finalizer")]
    AddFinalizer(#[source] kube::Error),
    #[error("cannot remove the finalizer")]
    RemoveFinalizer(#[source] kube::Error),
    #[error("the SlurmCluster has no {0}")]
    MissingMetadata(&'static str),
    #[error("every request slot of the cluster's slurmrestd connection is taken")]
    ClusterBusy,
    #[error("the SlurmCluster's registration disappeared while it was reconciled")]
    RegistrationLost,
    #[error("the SlurmJobs that may use the SlurmCluster are not listed yet")]
    SlurmJobsNotListed,
    #[error(
        "still used by SlurmJob(s) {0}: their deletion cancels their Slurm jobs through this SlurmCluster"
    )]
    InUse(String),
    #[error(
        "still used by SlurmNodeSet(s) {0}: a set drains its nodes and removes them from Slurm \
         through this SlurmCluster when it is deleted or scaled in; delete those not being \
         deleted yet (or scale them to 0) for the SlurmCluster to go"
    )]
    InUseByNodeSets(String),
    #[error(
        "spec.endpoint now reaches the Slurm cluster {now:?}, not {was:?}, where {holders} still \
         have jobs or nodes: through it their job ids and node names would name the other \
         cluster's, and their jobs would be judged lost and never cancelled, so the operator does not \
         use it (a connection it has to another endpoint stays as it was; without one, those \
         SlurmJobs wait, ClusterNotReady). Point spec.endpoint \
         back at {was:?}'s slurmrestd; or let those finish, or delete them, first (with the \
         annotation slurm.rs/skip-cancel=true if {was:?} is gone for good)"
    )]
    ClusterChanged {
        was: String,
        now: String,
        holders: String,
    },
    /// The endpoint a connection would move to (or be made through) did not say which Slurm
    /// cluster it serves, while something uses the cluster.
    #[error("asking slurmrestd which Slurm cluster it serves failed")]
    Unconfirmed(#[source] SlurmError),
}

impl Error {
    /// Stable PascalCase category: metric label, and the condition reason where there is one.
    pub fn category(&self) -> &'static str {
        match self {
            Self::InvalidConfig(e) => e.reason(),
            Self::ReadSecret { .. } => "ReadSecretFailed",
            Self::ReadConfigMap { .. } => "ReadConfigMapFailed",
            Self::CreateClient(e) | Self::CheckCluster { source: e, .. } | Self::Unconfirmed(e) => {
                e.category()
            }
            Self::PollerDown { reason, .. } => reason,
            Self::ControllerNotResponding => status::CONTROLLER_NOT_RESPONDING,
            Self::PatchStatus(_) => "PatchStatusFailed",
            Self::AddFinalizer(_) => "AddFinalizerFailed",
            Self::RemoveFinalizer(_) => "RemoveFinalizerFailed",
            Self::MissingMetadata(_) => "MissingMetadata",
            Self::ClusterBusy => "ClusterBusy",
            Self::RegistrationLost => "RegistrationLost",
            Self::SlurmJobsNotListed => "SlurmJobsNotListed",
            Self::InUse(_) => "InUseBySlurmJobs",
            Self::InUseByNodeSets(_) => "InUseBySlurmNodeSets",
            Self::ClusterChanged { .. } => status::CLUSTER_CHANGED,
        }
    }

    /// Whether only a change of the SlurmCluster (or of what it references) can fix this: the
    /// controller then waits for that change instead of retrying.
    pub fn is_invalid_spec(&self) -> bool {
        matches!(self, Self::InvalidConfig(_) | Self::MissingMetadata(_))
    }
}

fn backoff_key(cluster: &SlurmCluster) -> String {
    Backoffs::key(CONTROLLER, "", &cluster.name_any())
}

/// Reconcile one SlurmCluster: behind the finalizer, [`apply`] or [`cleanup`]. One tracing span per
/// reconcile, with the SlurmCluster's name and namespace.
pub async fn reconcile(cluster: Arc<SlurmCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let work = reconcile_inner(Arc::clone(&cluster), &ctx);
    kit::reconcile_as_leader(CONTROLLER, cluster.as_ref(), &ctx, work).await
}

async fn reconcile_inner(cluster: Arc<SlurmCluster>, ctx: &Context) -> Result<Action, Error> {
    let api: Api<SlurmCluster> = Api::all(ctx.client.clone());
    kit::with_finalizer(
        &api,
        cluster,
        |cluster| async move { apply(&cluster, ctx).await },
        |cluster| async move { cleanup(&cluster, ctx).await },
    )
    .await
}

kit::finalizer_failure!(Error);

/// Classify a failed reconcile: an unusable spec waits for a change (the Warning Event was
/// published by the reconcile, with the status); anything else retries with a per-SlurmCluster
/// exponential backoff, so a dead slurmrestd is never a hot loop.
pub fn error_policy(cluster: Arc<SlurmCluster>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = backoff_key(&cluster);
    if let Error::ClusterBusy = error {
        // Not a failure: its slurmrestd is slow for others too. Soon again, no slot held.
        ctx.metrics.deferred(CONTROLLER);
        return Action::requeue(ctx.backoff.next_busy(&key));
    }
    if let Error::RegistrationLost = error {
        // Not a failure: the SlurmCluster is gone (nothing to do for it), or this replica lost
        // the Lease (gaining it again reconciles every SlurmCluster). A SlurmCluster made again
        // with this name starts without this one's backoff.
        // Looked at again at the resync while leading: a SlurmCluster that a lagging re-list
        // left out (buried) and the watch shows again has no change that would reconcile it
        // (a deleted one is not reconciled again: it left the cache).
        debug!(name = %cluster.name_any(), "registration dropped: SlurmCluster deleted or Lease lost");
        ctx.backoff.reset(&key);
        return if ctx.leadership.is_leader() {
            Action::requeue(RESYNC)
        } else {
            Action::await_change()
        };
    }
    ctx.metrics.reconcile_failed(CONTROLLER, error.category());
    let name = cluster.name_any();
    match error {
        // Not failures: a deleted SlurmCluster waiting for its SlurmJobs to go, or for the
        // SlurmJob caches' first list. A fixed, calm pace.
        Error::InUse(users) => {
            info!(name, slurmjobs = %users, "deleted SlurmCluster waits for its SlurmJobs");
            return Action::requeue(USERS_RETRY);
        }
        Error::InUseByNodeSets(sets) => {
            info!(name, slurmnodesets = %sets, "deleted SlurmCluster waits for its SlurmNodeSets");
            return Action::requeue(USERS_RETRY);
        }
        Error::SlurmJobsNotListed => return Action::requeue(USERS_RETRY),
        // Waits for the admin or for the holders' jobs to end: looked at again calmly (each
        // look asks the new endpoint who it is).
        Error::ClusterChanged { holders, .. } => {
            warn!(name, %holders, error = %error, "SlurmCluster's endpoint reaches another Slurm cluster");
            return Action::requeue(IDENTITY_RETRY);
        }
        // No connection meanwhile, nor a poller to notice the end of the outage: a steady pace,
        // not a backoff growing to minutes.
        Error::Unconfirmed(_) => {
            warn!(name, reason = error.category(), error = %Chain(error), "SlurmCluster's endpoint does not say which Slurm cluster it serves");
            return Action::requeue(IDENTITY_RETRY);
        }
        _ => {}
    }
    if error.is_invalid_spec() {
        ctx.backoff.reset(&key);
        warn!(
            name, reason = error.category(), error = %Chain(error),
            "SlurmCluster is unusable as configured; waiting for it or its Secrets to change"
        );
        Action::await_change()
    } else {
        let delay = ctx.backoff.next(&key);
        warn!(
            name, reason = error.category(), error = %Chain(error), retry_in = ?delay,
            "SlurmCluster reconcile failed"
        );
        Action::requeue(delay)
    }
}

/// Bring the registration and the status in line with the spec.
async fn apply(cluster: &SlurmCluster, ctx: &Context) -> Result<Action, Error> {
    let key = ObjectRef::from_obj(cluster);
    let (observation, result) = match connect(cluster, &key, ctx).await {
        Ok(connected) => {
            let result = if connected.info.controller_responding {
                Ok(())
            } else {
                Err(Error::ControllerNotResponding)
            };
            (Observation::Connected(Box::new(connected)), result)
        }
        Err(error) => {
            let failure = match &error {
                Error::InvalidConfig(e) => {
                    drop_registration(&key, ctx);
                    Failure::config(e)
                }
                Error::CreateClient(e) => {
                    drop_registration(&key, ctx);
                    Failure {
                        disconnected: true,
                        ..Failure::slurm(e, false)
                    }
                }
                Error::CheckCluster {
                    source,
                    authenticated,
                } => Failure::slurm(source, *authenticated),
                Error::Unconfirmed(source) => Failure::slurm(source, false),
                Error::PollerDown { reason, message } => Failure::poller(reason, message),
                Error::ClusterChanged { .. } => Failure::cluster_changed(error.to_string()),
                // Trouble with the Kubernetes API: nothing new to say in the status.
                _ => return Err(error),
            };
            // Whether a poller still lists the cluster's jobs, whatever the failure: a kept
            // connection (a move refused) still does; none (dropped, or none made since a
            // restart while slurmrestd does not answer) does not.
            let failure = Failure {
                disconnected: !ctx.clusters.contains(&key),
                ..failure
            };
            let credentials = config::plan(&cluster.spec)
                .ok()
                .map(|plan| plan.auth.describe());
            (Observation::Failed(failure.naming(credentials)), Err(error))
        }
    };

    // The checks above may take a while (each slurmrestd request up to its timeout): a replica
    // that lost the Lease meanwhile writes nothing, as the new leader may have written already.
    if !ctx.leadership.is_leader() {
        return Err(Error::RegistrationLost);
    }
    let current = cluster.status.as_ref();
    let desired = status::desired(
        current,
        cluster.metadata.generation,
        &observation,
        crate::crd::condition::now(),
    );
    if status::changed(current, &desired) {
        let api: Api<SlurmCluster> = Api::all(ctx.client.clone());
        kit::apply_status(&api, &cluster.metadata, &desired)
            .await
            .map_err(Error::PatchStatus)?;
    }
    for notice in status::notice(current, &desired) {
        // A warning's note is its news: the same reason again with another message (another
        // cause of a refusal, other holders) is an Event of its own, not a count on the first,
        // which keeps the first note (`Notice::by_note`).
        let notice = if notice.warning {
            notice.by_note(EVENT_ACTION)
        } else {
            notice
        };
        kit::publish(&ctx.recorder, cluster, EVENT_ACTION, notice).await;
    }

    result?;
    ctx.backoff.reset(&backoff_key(cluster));
    Ok(Action::requeue(RESYNC))
}

fn drop_registration(key: &ObjectRef<SlurmCluster>, ctx: &Context) {
    if ctx.clusters.remove(key) {
        info!(
            "removed the slurmrestd client and stopped the poller: the configuration is unusable"
        );
    }
}

/// Steps 1 to 5: validate, read, register, check.
async fn connect(
    cluster: &SlurmCluster,
    key: &ObjectRef<SlurmCluster>,
    ctx: &Context,
) -> Result<Connected, Error> {
    let (plan, _) = register(cluster, key, ctx).await?;
    let handle = ctx.clusters.get(key).ok_or(Error::RegistrationLost)?;
    let _io = handle.try_io().ok_or(Error::ClusterBusy)?;
    let epoch = handle.client.identity_epoch();
    let info = handle
        .client
        .cluster_info()
        .await
        .map_err(|source| Error::CheckCluster {
            source,
            authenticated: false,
        })?;
    // Whom it reaches, before anything else is asked: once confirmed, the client refuses
    // answers of another cluster (`SlurmClient::expect_cluster`), so a move is judged here or
    // the checks below would only ever see it refused.
    // Connected without knowing whom it reaches (its endpoint did not answer then), or the
    // same endpoint serves another Slurm cluster since (an address moved to another
    // slurmrestd): its poller's index may be another cluster's, and goes. A connection found
    // to serve this very cluster before is not judged by the status again (a status write
    // that failed after a move still names the cluster before it).
    let now = &info.cluster_name;
    let name = cluster.name_any();
    if handle.confirmed_cluster(&name).as_deref() != Some(now.as_str()) {
        match same_cluster(cluster, now, ctx) {
            Ok(()) => handle.confirm_cluster_since(&name, now, Some(epoch)),
            Err(error @ Error::ClusterChanged { .. }) => {
                if ctx.clusters.remove(key) {
                    warn!(
                        "removed the slurmrestd client and stopped the poller: it reaches \
                         another Slurm cluster"
                    );
                }
                return Err(error);
            }
            Err(error) => return Err(error),
        }
    } else {
        // Found serving this cluster again: the client's expectation is this SlurmCluster's
        // word too (another SlurmCluster on the connection may have followed the endpoint
        // elsewhere meanwhile), and writes held after another cluster's answer go out again.
        handle.confirm_cluster_since(&name, now, Some(epoch));
    }
    check(&handle, info, plan.auth.describe(), &ctx.tag_key).await
}

/// How often a SlurmCluster whose endpoint reaches another Slurm cluster looks again.
const IDENTITY_RETRY: Duration = Duration::from_secs(30);

/// Whether a connection may follow the spec to a slurmrestd that serves the Slurm cluster
/// `now`: yes when the status recorded none or the same `ClusterName`, or when no SlurmJob
/// has a job there that has not ended and no SlurmNodeSet has nodes there. Job ids and node
/// names mean something only in their own cluster: through another one, the SlurmJobs' jobs
/// would be judged lost (never cancelled) and the sets' drains would reach its nodes. An admin
/// moving slurmrestd, or the same cluster's other slurmrestd, keeps the name.
fn same_cluster(cluster: &SlurmCluster, now: &str, ctx: &Context) -> Result<(), Error> {
    let Some(was) = cluster
        .status
        .as_ref()
        .and_then(|s| s.cluster_name.as_deref())
        .filter(|was| !was.is_empty() && !now.is_empty() && *was != now)
    else {
        return Ok(());
    };
    let holders = holders(cluster, ctx)?;
    if holders.is_empty() {
        info!(
            was,
            now,
            "the SlurmCluster now reaches another Slurm cluster; nothing of ours was on the first"
        );
        return Ok(());
    }
    Err(Error::ClusterChanged {
        was: was.to_owned(),
        now: now.to_owned(),
        holders: name_some(holders),
    })
}

/// The SlurmJobs with jobs that have not ended, and the SlurmNodeSets with nodes, that use
/// `cluster` (`namespace/name`); and each watched namespace that refuses the operator and
/// might use it (`namespace/*`): what it holds is not known, and a move is not undone.
fn holders(cluster: &SlurmCluster, ctx: &Context) -> Result<Vec<String>, Error> {
    let name = cluster.name_any();
    let mut holders = ctx
        .slurmjobs
        .with_live_jobs(&name)
        .ok_or(Error::SlurmJobsNotListed)?;
    // And every SlurmJob a deletion begun now would wait for: one whose submit answer was lost
    // (no job id in its status yet) or whose job the current connection's index shows. Moved,
    // its job would run on where nothing follows it, and the SlurmJob submit again elsewhere.
    let index = ctx
        .clusters
        .get(&ObjectRef::from_obj(cluster))
        .map(|handle| Arc::clone(&handle.index.borrow()));
    let now = Utc::now();
    let as_if_deleted = DeletedCluster {
        name: &name,
        index: index.as_deref(),
        deleted_at: Some(now),
        now,
    };
    holders.extend(
        ctx.slurmjobs
            .holding(&as_if_deleted, ctx)
            .ok_or(Error::SlurmJobsNotListed)?,
    );
    holders.sort();
    holders.dedup();
    holders.extend(ctx.nodesets.holding(cluster, &ctx.refused));
    let may_use = |namespace: &str| {
        cluster
            .spec
            .node_set_namespaces
            .iter()
            .any(|n| n == namespace)
            || cluster.spec.access.iter().any(|entry| {
                entry.namespace_selector.is_some()
                    || entry.namespaces.iter().any(|n| n == namespace)
            })
    };
    holders.extend(
        ctx.refused
            .namespaces()
            .into_iter()
            .filter(|ns| may_use(ns))
            .map(|ns| format!("{ns}/*")),
    );
    Ok(holders)
}

/// Before a connection moves to another endpoint (or is made at all) for a SlurmCluster whose
/// status names its Slurm cluster: ask the endpoint whom it serves, and keep the connection
/// there is (or none) when that is another cluster that [`same_cluster`] refuses. An endpoint
/// that does not answer keeps a working connection where it is, and gets none while something
/// still uses the cluster (its poller's first answers could reach the SlurmJobs before a check
/// could tell whom it serves). Returns the cluster the endpoint was found to serve.
async fn guard_move(
    cluster: &SlurmCluster,
    key: &ObjectRef<SlurmCluster>,
    validated: &config::Validated,
    ctx: &Context,
) -> Result<Option<String>, Error> {
    let recorded = cluster
        .status
        .as_ref()
        .is_some_and(|s| s.cluster_name.as_deref().is_some_and(|n| !n.is_empty()));
    let current = ctx.clusters.get(key);
    let moves = current
        .as_ref()
        .is_none_or(|handle| *handle.client.endpoint() != validated.client.endpoint);
    if !recorded || !moves {
        return Ok(None);
    }
    let probe = SlurmClient::new(validated.client.clone(), Arc::clone(&validated.credentials))
        .map_err(Error::CreateClient)?;
    match probe.cluster_info().await {
        Ok(info) => {
            same_cluster(cluster, &info.cluster_name, ctx)?;
            Ok(Some(info.cluster_name))
        }
        // Not answering, with nothing of ours to judge wrongly: a first connection is made
        // (its poller follows the outage and reconciles at its end) and its check asks.
        Err(_) if current.is_none() && holders(cluster, ctx)?.is_empty() => Ok(None),
        Err(source) => Err(Error::Unconfirmed(source)),
    }
}

/// Steps 1 to 4: validate, read, and register the connection, or follow what changed in the
/// spec or its Secrets (a new endpoint, a rotated key).
async fn register(
    cluster: &SlurmCluster,
    key: &ObjectRef<SlurmCluster>,
    ctx: &Context,
) -> Result<(ConfigPlan, Upserted), Error> {
    let plan = config::plan(&cluster.spec).map_err(Error::InvalidConfig)?;
    config::endpoint_allowed(&plan.client.endpoint, &ctx.allowed_endpoints)
        .map_err(Error::InvalidConfig)?;
    let sources = read_sources(&plan, &ctx.credentials_namespace, ctx).await?;
    let validated = plan.build(&sources).map_err(Error::InvalidConfig)?;
    let probed = guard_move(cluster, key, &validated, ctx).await?;
    // A new connection's answers are held to the Slurm cluster the probe found, or else the one
    // the status names, from its poller's first cycle on: until `connect` has judged whom the
    // endpoint reaches, another cluster's jobs must not reach the index, and through it the
    // SlurmJobs (their submits wait for a synced index).
    let expected = probed.clone().or_else(|| {
        cluster
            .status
            .as_ref()
            .and_then(|s| s.cluster_name.clone())
            .filter(|n| !n.is_empty())
    });
    let upserted = ctx
        .clusters
        .upsert(
            key,
            validated.client,
            validated.settings,
            validated.credentials,
            |label, client, poller, events| {
                if let Some(name) = &expected {
                    client.expect_cluster(name);
                }
                crate::state::poller::spawn(
                    label,
                    client,
                    poller,
                    ctx.tag_key.clone(),
                    events,
                    ctx.metrics.clone(),
                )
            },
        )
        .map_err(Error::CreateClient)?;
    match upserted {
        Upserted::Created => {
            info!(endpoint = %plan.client.endpoint, "registered a slurmrestd client and started its poller")
        }
        Upserted::Replaced => {
            info!(endpoint = %plan.client.endpoint, "connection settings changed: replaced the slurmrestd client and its poller")
        }
        Upserted::Joined => {
            info!(endpoint = %plan.client.endpoint, pollers = ctx.clusters.pollers(), "shares the running slurmrestd client and poller of another SlurmCluster with the same endpoint and credentials")
        }
        Upserted::CredentialsRotated => debug!("credentials refreshed in the running client"),
        Upserted::Unchanged => {}
    }
    if let (Some(name), Some(handle)) = (probed, ctx.clusters.get(key)) {
        handle.confirm_cluster(&cluster.name_any(), &name);
    }
    // The Lease lost while this reconcile read the Secrets: the replica drops its connections
    // once it sees the loss, so a registration made before this check goes with them, and one
    // made after the loss goes here. A standby holds none. Likewise a SlurmCluster deleted
    // meanwhile (its finalizer removed by hand): a registration made before the watch saw the
    // deletion goes with it, one made after goes here.
    let deleted = cluster
        .metadata
        .uid
        .as_deref()
        .is_some_and(|uid| ctx.clusters.gone(uid));
    if deleted || !ctx.leadership.is_leader() {
        ctx.clusters.remove(key);
        return Err(Error::RegistrationLost);
    }
    Ok((plan, upserted))
}

/// Read what the plan references from the operator's credentials namespace. Not found is not an error here:
/// [`ConfigPlan::build`] turns it into the right reason.
async fn read_sources(plan: &ConfigPlan, namespace: &str, ctx: &Context) -> Result<Sources, Error> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    let read_secret = |name: String| {
        let secrets = secrets.clone();
        async move {
            secrets
                .get_opt(&name)
                .await
                .map_err(|source| Error::ReadSecret { name, source })
        }
    };
    let auth_name = &plan.auth.secret().name;
    let mut sources = Sources {
        auth: read_secret(auth_name.clone()).await?,
        ..Sources::default()
    };
    match &plan.ca {
        None => {}
        Some(CaSource::Secret(r)) if r.name == *auth_name => {
            sources.ca_secret = sources.auth.clone();
        }
        Some(CaSource::Secret(r)) => sources.ca_secret = read_secret(r.name.clone()).await?,
        Some(CaSource::ConfigMap(r)) => {
            let config_maps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), namespace);
            sources.ca_config_map =
                config_maps
                    .get_opt(&r.name)
                    .await
                    .map_err(|source| Error::ReadConfigMap {
                        name: r.name.clone(),
                        source,
                    })?;
        }
    }
    Ok(sources)
}

/// Step 5, after `connect` asked who the cluster is (`info`, which proves the credentials):
/// what it has, and whether its poller is healthy. Node counts come from the index once the poller has synced (no extra call).
async fn check(
    handle: &ClusterHandle,
    info: ClusterInfo,
    credentials: String,
    key: &TagKey,
) -> Result<Connected, Error> {
    let failed = |source| Error::CheckCluster {
        source,
        authenticated: true,
    };
    let partitions = handle
        .client
        .partitions()
        .await
        .map_err(failed)?
        .into_iter()
        .map(|p| p.name)
        .collect();
    // Copy the Arc out: the watch borrow must not live across an await.
    let state = Arc::clone(&handle.index.borrow());
    let nodes = if state.nodes_synced_at.is_some() {
        NodeCounts::count(state.nodes.values().map(|n| &n.state))
    } else {
        match handle.client.nodes(None).await.map_err(failed)? {
            Changes::Changed { items, .. } => NodeCounts::count(items.iter().map(|n| &n.state)),
            Changes::Unchanged => NodeCounts::default(),
        }
    };
    if let Health::Down {
        reason, message, ..
    } = &state.health
    {
        return Err(Error::PollerDown {
            reason,
            message: message.clone(),
        });
    }
    // Duplicate protection, from accounting's record of a finished job of ours. Its failure is
    // not the cluster's: the condition stays as it was.
    let protection = match status::protection_probe(&state, key) {
        Some(job_id) => match handle.client.accounting_job(job_id).await {
            Ok(records) => status::protection(job_id, records.as_deref()),
            Err(error) => {
                debug!(
                    job_id,
                    reason = error.category(),
                    "accounting did not answer the duplicate-protection check"
                );
                None
            }
        },
        None => None,
    };
    Ok(Connected {
        endpoint: handle.client.endpoint().to_string(),
        credentials,
        info,
        partitions,
        nodes,
        protection,
        listing: state.listing(),
    })
}

/// The SlurmJobs and SlurmNodeSets (`namespace/name`) that still need a deleted SlurmCluster's
/// client: the SlurmJob controllers' rule, and sets that drain and remove their nodes through it
/// when they go. Those of a namespace refused past the grace count for nothing; before such a
/// count releases the cluster, the refusals are asked again (a watch that resumes after its
/// rights came back brings no event to clear them, and the probe runs only every 30 s).
async fn users_of(
    cluster: &SlurmCluster,
    deleted: &DeletedCluster<'_>,
    ctx: &Context,
) -> Result<(Vec<String>, Vec<String>), Error> {
    let count = || {
        let users = ctx
            .slurmjobs
            .holding(deleted, ctx)
            .ok_or(Error::SlurmJobsNotListed)?;
        Ok::<_, Error>((users, ctx.nodesets.holding(cluster, &ctx.refused)))
    };
    let (users, sets) = count()?;
    let skipped = || {
        !ctx.refused.past_grace(SLURMJOBS).is_empty()
            || !ctx.refused.past_grace(SLURMNODESETS).is_empty()
    };
    if users.is_empty() && sets.is_empty() && skipped() {
        ctx.refused.probe(&ctx.client).await;
        return count();
    }
    Ok((users, sets))
}

/// Deletion: forget the client (its poller stops). Idempotent: a SlurmCluster that was never
/// registered (or whose slurmrestd is long gone) is fine.
/// How often a deleted SlurmCluster looks again for the SlurmJobs that still use it.
const USERS_RETRY: Duration = Duration::from_secs(5);

/// A deleted SlurmCluster keeps its client while a SlurmJob naming it may still run something
/// in Slurm (the SlurmJob controller's rule, `slurmjob::holds_cluster`): that SlurmJob's finalizer needs the client to cancel it.
/// Then the client goes and its poller stops. A SlurmJob that never ran or whose run ended does
/// not hold it (else any tenant could, by naming it). Read from the SlurmJob controllers'
/// caches, not listed. Never a cycle: a SlurmJob whose deletion cannot reach Slurm lets go at
/// its deadline (or with the skip-cancel annotation), and a settled one at once.
async fn cleanup(cluster: &SlurmCluster, ctx: &Context) -> Result<Action, Error> {
    let name = cluster.name_any();
    let key = ObjectRef::from_obj(cluster);
    let index = ctx
        .clusters
        .get(&key)
        .map(|handle| Arc::clone(&handle.index.borrow()));
    let deleted = DeletedCluster {
        name: &name,
        index: index.as_deref(),
        deleted_at: cluster
            .metadata
            .deletion_timestamp
            .as_ref()
            .and_then(crate::crd::time::to_utc),
        now: Utc::now(),
    };
    let (users, sets) = users_of(cluster, &deleted, ctx).await?;
    if !users.is_empty() || !sets.is_empty() {
        // The SlurmJobs' deletions cancel, and the sets drain, through this connection: connect
        // again when there is none (deleted while the operator was down, or before this replica
        // took over), and follow what changed meanwhile (a rotated key, a moved endpoint: the
        // old ones may no longer work). A configuration that cannot be built keeps the
        // connection there is, whose credentials may still work; without any, the deletions
        // wait until their deadline.
        let registered = register(cluster, &key, ctx).await;
        if let Some(handle) = ctx.clusters.get(&key) {
            release_writes(&handle, &key, ctx).await;
        }
        match registered {
            Ok((_, Upserted::Unchanged)) => {}
            Ok((_, upserted)) => info!(
                ?upserted,
                "deleted SlurmCluster connected for its SlurmJobs' and SlurmNodeSets' cleanup"
            ),
            Err(error) => warn!(
                reason = error.category(), error = %Chain(&error),
                connected = ctx.clusters.contains(&key),
                "deleted SlurmCluster cannot connect with its configuration; its SlurmJobs' and \
                 SlurmNodeSets' deletions use the connection there is, or wait until their \
                 deadline"
            ),
        }
        // An error keeps the finalizer (the finalizer helper removes it after any Ok).
        let error = if users.is_empty() {
            Error::InUseByNodeSets(name_some(sets))
        } else {
            Error::InUse(name_some(users))
        };
        say_blocked(cluster, &error, ctx).await?;
        return Err(error);
    }
    if ctx.clusters.remove(&key) {
        info!("SlurmCluster deleted: removed its slurmrestd client and stopped its poller");
    }
    ctx.backoff.reset(&backoff_key(cluster));
    Ok(Action::await_change())
}

/// A deleted SlurmCluster's connection whose writes are held (an answer of another Slurm
/// cluster came) is released once its endpoint answers for the cluster this SlurmCluster
/// confirmed: its SlurmJobs' deletions cancel, and its sets drain, through it. (`connect`
/// does this for a live one; a deleted one is not connected again.)
async fn release_writes(handle: &ClusterHandle, key: &ObjectRef<SlurmCluster>, ctx: &Context) {
    let name = key.name.as_str();
    let Some(confirmed) = handle.confirmed_cluster(name) else {
        return;
    };
    if !handle.client.writes_held() {
        return;
    }
    let epoch = handle.client.identity_epoch();
    match handle.client.cluster_info().await {
        Ok(info) if info.cluster_name == confirmed => {
            handle.confirm_cluster_since(name, &confirmed, Some(epoch));
        }
        Ok(info) if !info.cluster_name.is_empty() => {
            // Nothing of its own can be done through it there, and its word would hold the
            // writes of every other SlurmCluster sharing the connection: it leaves. Its next
            // cleanup connects again only where a probe finds its cluster (`guard_move`).
            warn!(
                confirmed,
                now = info.cluster_name,
                "the deleted SlurmCluster's endpoint reaches another Slurm cluster: removed its \
                 connection; its SlurmJobs' and SlurmNodeSets' deletions wait for it to serve \
                 its cluster again"
            );
            ctx.clusters.remove(key);
        }
        Ok(_) => {}
        Err(error) => debug!(error = %Chain(&error), "slurmrestd did not say whom it serves"),
    }
}

/// `DeletionBlocked=True` with what holds the deleted SlurmCluster (`error`), written when it
/// says something new: the admin sees in the object why it stays `Terminating`.
async fn say_blocked(cluster: &SlurmCluster, error: &Error, ctx: &Context) -> Result<(), Error> {
    if !ctx.leadership.is_leader() {
        return Err(Error::RegistrationLost);
    }
    let mut desired = cluster.status.clone().unwrap_or_default();
    let changed = crate::crd::condition::upsert(
        &mut desired.conditions,
        crate::crd::condition::new(
            status::DELETION_BLOCKED,
            true,
            error.category(),
            error.to_string(),
            cluster.metadata.generation,
            crate::crd::condition::now(),
        ),
    );
    if changed {
        let api: Api<SlurmCluster> = Api::all(ctx.client.clone());
        kit::apply_status(&api, &cluster.metadata, &desired)
            .await
            .map_err(Error::PatchStatus)?;
    }
    Ok(())
}

/// At most [`NAMED_USERS`] names, sorted, and how many more there are.
fn name_some(mut names: Vec<String>) -> String {
    names.sort_unstable();
    kit::name_some(&names, NAMED_USERS)
}

/// How many SlurmJobs a deleted SlurmCluster's wait names.
const NAMED_USERS: usize = 10;

/// The SlurmClusters whose spec `references` something (of the credentials namespace).
pub fn clusters_referencing(
    store: &Store<SlurmCluster>,
    references: impl Fn(&SlurmClusterSpec) -> bool,
) -> Vec<ObjectRef<SlurmCluster>> {
    store
        .state()
        .iter()
        .filter(|c| references(&c.spec))
        .map(|c| ObjectRef::from_obj(c.as_ref()))
        .collect()
}

/// The Clusters whose poller changed health or whose listing of every job started or stopped
/// failing: each such event is a reconcile of its SlurmCluster, so `Ready` and `JobsListed` say
/// it now rather than at the next [`RESYNC`].
pub fn status_targets(event: &SlurmEvent, _: &Store<SlurmCluster>) -> Vec<ObjectRef<SlurmCluster>> {
    match event {
        SlurmEvent::HealthChanged { cluster, up } => {
            debug!(cluster = %cluster, up, "poller health changed");
            vec![cluster.clone()]
        }
        SlurmEvent::ListingChanged { cluster, failing } => {
            debug!(cluster = %cluster, failing, "the listing of every job changed");
            vec![cluster.clone()]
        }
        _ => Vec::new(),
    }
}

/// Drops the registrations of SlurmClusters that no longer exist, seen by the watcher: at their
/// Delete event, and at the end of a re-list (after an expired watch, an API server restart)
/// that does not show them, because a re-list reports what exists, never what went meanwhile
/// (one whose finalizer was removed by hand while the watch was down). Their pollers would
/// otherwise poll with the deleted SlurmCluster's credentials until the operator restarts.
#[derive(Default)]
struct GoneClusters {
    /// The SlurmClusters of the re-list under way.
    listing: Option<HashSet<ObjectRef<SlurmCluster>>>,
    /// The uid of each SlurmCluster the watch shows: one a re-list no longer shows is buried
    /// ([`ClusterRegistry::bury`]) as a Delete would, so that a reconcile of it still under way
    /// registers nothing after the re-list.
    uids: HashMap<ObjectRef<SlurmCluster>, String>,
}

impl GoneClusters {
    /// The SlurmClusters whose registration `event` ended.
    fn observe(
        &mut self,
        event: &watcher::Event<SlurmCluster>,
        registry: &ClusterRegistry,
    ) -> Vec<ObjectRef<SlurmCluster>> {
        match event {
            watcher::Event::Delete(cluster) => {
                let key = ObjectRef::from_obj(cluster);
                self.uids.remove(&key);
                if let Some(uid) = &cluster.metadata.uid {
                    registry.bury(uid);
                }
                if registry.remove(&key) {
                    return vec![key];
                }
            }
            watcher::Event::Init => self.listing = Some(HashSet::new()),
            watcher::Event::InitApply(cluster) => {
                self.seen(cluster, registry);
                if let Some(listing) = &mut self.listing {
                    listing.insert(ObjectRef::from_obj(cluster));
                }
            }
            watcher::Event::InitDone => {
                if let Some(listed) = self.listing.take() {
                    self.uids.retain(|key, uid| {
                        let kept = listed.contains(key);
                        if !kept {
                            registry.bury(uid);
                        }
                        kept
                    });
                    return registry
                        .clusters()
                        .into_iter()
                        .filter(|key| !listed.contains(key) && registry.remove(key))
                        .collect();
                }
            }
            watcher::Event::Apply(cluster) => self.seen(cluster, registry),
        }
        Vec::new()
    }

    /// `cluster` exists: were its uid buried (by a re-list that lagged behind the watch), it
    /// would never register again. One of its name with another uid went meanwhile.
    fn seen(&mut self, cluster: &SlurmCluster, registry: &ClusterRegistry) {
        let Some(uid) = &cluster.metadata.uid else {
            return;
        };
        registry.unbury(uid);
        if let Some(before) = self.uids.insert(ObjectRef::from_obj(cluster), uid.clone())
            && before != *uid
        {
            registry.bury(&before);
        }
    }
}

/// The running SlurmCluster controller: its store of SlurmClusters (ready once the first list is
/// in) and the future that drives it until `shutdown` is cancelled and running reconciles
/// finish. SlurmClusters are cluster-scoped: one controller, whatever namespaces the others
/// watch; their Secrets and ConfigMaps are watched in the credentials namespace only.
pub fn run(
    ctx: Context,
    shutdown: CancellationToken,
) -> (
    Store<SlurmCluster>,
    impl Future<Output = ()> + Send + 'static,
) {
    let client = ctx.client.clone();
    let (store, writer) = reflector::store();

    // Registrations of Clusters deleted without our cleanup (finalizer removed by hand) are
    // dropped when the deletion is seen, or when a re-list no longer shows them.
    let registry = ctx.clusters.clone();
    let mut gone = GoneClusters::default();
    let clusters = watcher(
        Api::<SlurmCluster>::all(client.clone()),
        watcher::Config::default().any_semantic(),
    )
    .default_backoff()
    .inspect_ok(move |event| {
        for cluster in gone.observe(event, &registry) {
            info!(%cluster, "SlurmCluster gone: removed its slurmrestd client");
        }
    })
    .modify(kit::trim_for_cache)
    .reflect(writer)
    .touched_after_relist(store.clone())
    // Our own status writes change neither: no reconcile per status write.
    .predicate_filter(
        predicates::generation.combine(predicates::finalizers),
        Default::default(),
    );

    // Metadata only, and only the marked ones: Secret data is never cached in the operator.
    // (No cache of theirs is read: a relist's objects pass as they come.)
    let credentials = ctx.credentials_namespace.clone();
    let secrets = watcher(
        Api::<PartialObjectMeta<Secret>>::namespaced(client.clone(), &credentials),
        watcher::Config::default().labels(&format!("{CREDENTIALS_LABEL}=true")),
    )
    .default_backoff()
    .touched_objects();
    // The marked ConfigMaps only, as for Secrets: a CA bundle anyone who may write ConfigMaps
    // there could replace would choose whom the tokens go to.
    let config_maps = watcher(
        Api::<PartialObjectMeta<ConfigMap>>::namespaced(client, &credentials),
        watcher::Config::default().labels(&format!("{CREDENTIALS_LABEL}=true")),
    )
    .default_backoff()
    .touched_objects();

    let by_secret = store.clone();
    let by_config_map = store.clone();
    let pollers = kit::slurm_triggers(
        CONTROLLER,
        ctx.events.subscribe(),
        store.clone(),
        status_targets,
    );
    let driver = Controller::for_stream(clusters, store.clone())
        .with_config(
            controller::Config::default()
                .debounce(Duration::from_millis(500))
                .concurrency(ctx.reconcile_concurrency),
        )
        .watches_stream(secrets, move |secret: PartialObjectMeta<Secret>| {
            let name = secret.name_any();
            clusters_referencing(&by_secret, |spec| {
                config::referenced_secrets(spec).any(|n| n == name)
            })
        })
        .watches_stream(config_maps, move |cm: PartialObjectMeta<ConfigMap>| {
            let name = cm.name_any();
            clusters_referencing(&by_config_map, |spec| {
                config::referenced_config_maps(spec).any(|n| n == name)
            })
        })
        .reconcile_on(pollers)
        .reconcile_all_on(ctx.leadership.gained())
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile, error_policy, Arc::new(ctx))
        .for_each(|result| kit::log_outcome(CONTROLLER, result));
    (store, driver)
}

#[cfg(test)]
mod tests;
