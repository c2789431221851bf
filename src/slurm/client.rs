//! `SlurmClient`: the one door to slurmrestd. Everything above it speaks domain types
//! (`super::types`) and `SlurmError`; the generated clients and their types stay behind the
//! dialects (`super::dialect`), one per REST API version.
//!
//! **Which version.** A client speaks the version pinned in its [`ClientConfig`] (as it is; when
//! slurmrestd does not serve it, [`SlurmClient::cluster_info`] says what it serves), or negotiates
//! on first use: it asks `/slurm/<version>/ping/` newest first and keeps the first version
//! slurmrestd serves (an unserved version's path is a plain-text 404) whose answer names that
//! version's data parser. A slurmctld call that later finds its version unserved (slurmrestd was
//! upgraded or restarted with other plugins) makes the next call negotiate again. Clones and
//! [`SlurmClient::as_user`] clients share the outcome.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};

use super::auth::Credentials;
use super::config::ClientConfig;
use super::dialect::{Dialect, dispatch};
use super::error::{SlurmError, shortened};
use super::identity::Identity;
use super::transport::{RequestObserver, Transport};
use super::types::{
    Changes, ClockReading, ClusterInfo, Job, JobStateEntry, JobUpdate, Node, Partition, RpcStats,
    SubmitRequest, Submitted,
};
use super::version::{ApiVersion, versions_in_paths};

/// A client for one slurmrestd. Cheap to clone; clones share connections, credentials and the
/// negotiated version.
#[derive(Clone)]
pub struct SlurmClient {
    /// One per version, indexed by [`ApiVersion::index`]; all share one transport.
    dialects: Arc<Vec<Dialect>>,
    negotiation: Arc<Negotiation>,
    config: Arc<ClientConfig>,
    /// The version at which slurmrestd was found not to serve `/jobs/state/`
    /// ([`Self::serves_job_states`]).
    no_job_states: Arc<Mutex<Option<ApiVersion>>>,
    /// The Slurm cluster this client was confirmed to reach ([`Self::expect_cluster`]); shared
    /// by every clone and [`Self::as_user`] client.
    pub(crate) identity: Arc<Identity>,
}

/// The version in use, shared by every clone.
#[derive(Debug, Default)]
struct Negotiation {
    current: Mutex<Option<ApiVersion>>,
    /// One negotiation at a time; the others wait for its outcome.
    running: tokio::sync::Mutex<()>,
}

impl Negotiation {
    fn current(&self) -> Option<ApiVersion> {
        *self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn set(&self, version: Option<ApiVersion>) {
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = version;
    }
}

impl std::fmt::Debug for SlurmClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlurmClient")
            .field("endpoint", &self.config.endpoint.as_str())
            .field("api_version", &self.negotiation.current())
            .finish_non_exhaustive()
    }
}

fn dialects(
    config: &ClientConfig,
    http: reqwest::Client,
    transport: Arc<Transport>,
) -> Vec<Dialect> {
    let base_url = config.base_url();
    ApiVersion::ALL
        .into_iter()
        .map(|version| Dialect::new(version, &base_url, http.clone(), Arc::clone(&transport)))
        .collect()
}

impl SlurmClient {
    pub fn new(config: ClientConfig, credentials: Arc<Credentials>) -> Result<Self, SlurmError> {
        Self::with_observer(config, credentials, None)
    }

    /// Like `new`, reporting every request to `observer` (metrics).
    pub fn with_observer(
        config: ClientConfig,
        credentials: Arc<Credentials>,
        observer: Option<Arc<dyn RequestObserver>>,
    ) -> Result<Self, SlurmError> {
        let http = config.http_client()?;
        let transport = Arc::new(Transport::new(
            credentials,
            observer,
            config.max_response_bytes,
        ));
        // A pin is the admin's word: used as it is, never probed. Should slurmrestd not serve it,
        // `cluster_info` says so with what it does serve.
        let negotiation = Negotiation::default();
        negotiation.set(config.api_version);
        Ok(Self {
            dialects: Arc::new(dialects(&config, http, transport)),
            negotiation: Arc::new(negotiation),
            config: Arc::new(config),
            no_job_states: Arc::default(),
            identity: Arc::default(),
        })
    }

    pub fn endpoint(&self) -> &url::Url {
        &self.config.endpoint
    }

    /// How long a request may take (`ClientConfig::request_timeout`): after that this client
    /// gives up on it, though slurmrestd may still carry it out.
    pub fn request_timeout(&self) -> std::time::Duration {
        self.config.request_timeout
    }

    /// The pinned version, if any (`ClientConfig::api_version`).
    pub fn pinned_api_version(&self) -> Option<ApiVersion> {
        self.config.api_version
    }

    /// The version in use: pinned or negotiated; `None` before the first call.
    pub fn api_version(&self) -> Option<ApiVersion> {
        self.negotiation.current()
    }

    /// From now on, answers must come from Slurm cluster `name` (`ClusterName`): one rendered
    /// for another, error answers included, is refused ([`SlurmError::OtherCluster`]), and
    /// after it every write is held until [`Self::expect_cluster_since`] confirms the cluster
    /// on a newer word (this releases held writes only when every refused answer came from
    /// `name`). `/diag` and `/ping`, which find out whom the endpoint serves, are always
    /// answered. Called once the SlurmCluster controller has confirmed the cluster; until
    /// then, none is expected.
    pub fn expect_cluster(&self, name: &str) {
        self.identity.expect(name, None);
    }

    /// [`Self::expect_cluster`] with what `/diag` answered after [`Self::identity_epoch`] gave
    /// `epoch`: writes held for an answer of another cluster refused since stay held.
    pub fn expect_cluster_since(&self, name: &str, epoch: u64) {
        self.identity.expect(name, Some(epoch));
    }

    /// Read before asking whom the endpoint serves ([`Self::expect_cluster_since`]).
    pub fn identity_epoch(&self) -> u64 {
        self.identity.epoch()
    }

    /// Whether writes are held: an answer of another Slurm cluster than the one expected came
    /// since the last [`Self::expect_cluster`].
    pub fn writes_held(&self) -> bool {
        self.identity.writes_held()
    }

    /// The Slurm cluster answers must come from, if one was confirmed.
    pub fn expected_cluster(&self) -> Option<Arc<str>> {
        self.identity.expected()
    }

    fn any_dialect(&self) -> &Dialect {
        // `dialects` has one entry per version; index 0 exists.
        &self.dialects[0]
    }

    /// A client for the same slurmrestd (the same connections, settings, request observer and
    /// negotiated version) whose requests act as Slurm user `user`: tokens minted for that user
    /// with the same key ([`Credentials::for_user`]). How a tenant's job runs as the tenant's
    /// user.
    pub fn as_user(&self, user: &str) -> Result<Self, SlurmError> {
        let transport = self.any_dialect().transport();
        let credentials = transport.credentials().for_user(user)?;
        let http = self.any_dialect().http().clone();
        let transport = Arc::new(Transport::new(
            Arc::new(credentials),
            transport.observer.clone(),
            self.config.max_response_bytes,
        ));
        Ok(Self {
            dialects: Arc::new(dialects(&self.config, http, transport)),
            negotiation: Arc::clone(&self.negotiation),
            config: Arc::clone(&self.config),
            no_job_states: Arc::clone(&self.no_job_states),
            identity: Arc::clone(&self.identity),
        })
    }

    /// Whether this client's credentials are a ready token rather than a key that mints tokens.
    pub fn uses_ready_token(&self) -> bool {
        self.any_dialect()
            .transport()
            .credentials()
            .is_ready_token()
    }

    /// The Slurm user this client's requests act as, when the credentials say (a minted token's
    /// user, or a ready token's `sun` claim): the user a job it submits runs as.
    pub fn user(&self) -> Option<String> {
        self.any_dialect()
            .transport()
            .credentials()
            .acting_user()
            .map(str::to_owned)
    }

    /// Swap the credentials used from the next request on (key or token rotation).
    pub fn set_credentials(&self, credentials: Arc<Credentials>) {
        self.any_dialect().transport().set_credentials(credentials);
    }

    /// Find the version to speak now (the pinned one, checked by a request, or the newest both
    /// sides speak) and use it from the next call on.
    ///
    /// A slurmrestd that serves none (or not the pinned one) gives `UnsupportedVersion`, naming
    /// what it serves (from its own `/openapi/v3`) and what the operator speaks. Other failures
    /// (unreachable, refused credentials) are returned as they are: nothing was learned.
    pub async fn negotiate(&self) -> Result<ApiVersion, SlurmError> {
        let _running = self.negotiation.running.lock().await;
        let version = self.probe().await?;
        self.negotiation.set(Some(version));
        Ok(version)
    }

    async fn probe(&self) -> Result<ApiVersion, SlurmError> {
        let pinned = self.config.api_version;
        let candidates: Vec<ApiVersion> = match pinned {
            Some(version) => vec![version],
            None => ApiVersion::newest_first().collect(),
        };
        for version in candidates {
            let dialect = &self.dialects[version.index()];
            let answer = dispatch!(dialect, self, |api, caller| api.ping(&caller).await);
            match answer {
                Ok((_, data_parser)) => {
                    check_data_parser(self.config.endpoint.as_str(), version, &data_parser)?;
                    tracing::debug!(%version, pinned = pinned.is_some(), "slurmrestd REST API version chosen");
                    return Ok(version);
                }
                Err(SlurmError::UnsupportedVersion { .. }) => continue,
                Err(error) => return Err(error),
            }
        }
        let served = self.served_versions().await;
        Err(SlurmError::UnsupportedVersion {
            endpoint: self.config.endpoint.to_string(),
            detail: no_common_version(pinned, served.as_deref()),
        })
    }

    /// The versions this slurmrestd serves, read from the paths of its own OpenAPI document
    /// (`/openapi/v3`; ~1.6 MB for three versions, so only asked when negotiation failed).
    /// `None` when it could not be read.
    async fn served_versions(&self) -> Option<Vec<String>> {
        let url = format!("{}/openapi/v3", self.config.base_url());
        let http = self.any_dialect().http();
        let mut request = http.get(url).build().ok()?;
        let credentials = self.any_dialect().transport().credentials();
        super::auth::authorize(&credentials, &mut request)
            .await
            .ok()?;
        let mut response = http.execute(request).await.ok()?;
        if !response.status().is_success() {
            tracing::debug!(
                status = response.status().as_u16(),
                "slurmrestd's /openapi/v3 refused"
            );
            return None;
        }
        let limit = usize::try_from(self.config.max_response_bytes).unwrap_or(usize::MAX);
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.ok()? {
            if body.len() + chunk.len() > limit {
                tracing::debug!(
                    limit,
                    "slurmrestd's /openapi/v3 is larger than the response limit"
                );
                return None;
            }
            body.extend_from_slice(&chunk);
        }
        Some(versions_in_paths(&String::from_utf8_lossy(&body)))
    }

    /// The dialect to use: the current one, or a fresh negotiation's.
    async fn dialect(&self) -> Result<&Dialect, SlurmError> {
        let version = match self.negotiation.current() {
            Some(version) => version,
            None => {
                let _running = self.negotiation.running.lock().await;
                // Another call may have negotiated while this one waited.
                match self.negotiation.current() {
                    Some(version) => version,
                    None => {
                        let version = self.probe().await?;
                        self.negotiation.set(Some(version));
                        version
                    }
                }
            }
        };
        Ok(&self.dialects[version.index()])
    }

    /// A slurmctld path of the version in use was not served: negotiate again on the next call
    /// (a pinned version stays).
    fn forget_unserved<T>(&self, result: Result<T, SlurmError>) -> Result<T, SlurmError> {
        if let Err(SlurmError::UnsupportedVersion { .. }) = &result
            && self.config.api_version.is_none()
        {
            tracing::info!(
                endpoint = %self.config.endpoint,
                version = ?self.negotiation.current(),
                "slurmrestd no longer serves the REST API version in use; negotiating again"
            );
            self.negotiation.set(None);
        }
        result
    }

    /// Whether a slurmctld (the primary or a backup) answers. Does NOT prove the token is valid (`/ping` does not
    /// check it); use [`Self::cluster_info`] for that.
    pub async fn ping(&self) -> Result<bool, SlurmError> {
        let dialect = self.dialect().await?;
        let result = dispatch!(dialect, self, |api, c| api.ping(&c).await);
        self.forget_unserved(result)
            .map(|(responding, _)| responding)
    }

    /// Cluster identity, release and the REST API version in use, through `/diag` and `/ping`.
    /// `/diag` checks the token, so success here means the credentials work.
    pub async fn cluster_info(&self) -> Result<ClusterInfo, SlurmError> {
        match self.checked_cluster_info().await {
            Err(SlurmError::UnsupportedVersion { endpoint, detail })
                if self.config.api_version.is_some() =>
            {
                // Say what it serves instead, when its own /openapi/v3 names versions.
                let detail = match self.served_versions().await {
                    Some(served) if !served.is_empty() => {
                        no_common_version(self.config.api_version, Some(&served))
                    }
                    _ => detail,
                };
                Err(SlurmError::UnsupportedVersion { endpoint, detail })
            }
            other => other,
        }
    }

    async fn checked_cluster_info(&self) -> Result<ClusterInfo, SlurmError> {
        // `/diag` first: it checks the token, so bad credentials are named as such.
        let dialect = self.dialect().await?;
        let result = dispatch!(dialect, self, |api, c| api.diag(&c, false).await);
        let mut info = self.forget_unserved(result)?;
        info.controller_responding = self.ping().await?;
        let version: ApiVersion =
            info.api_version
                .parse()
                .map_err(|_| SlurmError::UnsupportedVersion {
                    endpoint: self.config.endpoint.to_string(),
                    detail: format!("unknown version {}", shortened(&info.api_version, 16)),
                })?;
        check_data_parser(self.config.endpoint.as_str(), version, &info.data_parser)?;
        Ok(info)
    }

    /// All nodes, or `Unchanged` when nothing changed since `since` (a previous `as_of`).
    ///
    /// Slurm 24.11's slurmrestd answers `update_time=T` with HTTP 500 "Unable to query
    /// partitions" when nodes changed since T but partitions did not (it passes T on to its
    /// partition query, which reports "no change" as a failure; 26.05 answers fine): the list is
    /// then asked again without `update_time`, which is what a working answer would have held.
    pub async fn nodes(&self, since: Option<i64>) -> Result<Changes<Node>, SlurmError> {
        let dialect = self.dialect().await?;
        let result = dispatch!(dialect, self, |api, c| api.nodes(&c, since).await);
        match result {
            Ok(changes) => Ok(changes),
            Err(SlurmError::NotModified { .. }) if since.is_some() => Ok(Changes::Unchanged),
            // 24.11 fails an incremental list whenever a node changed ("Unable to query
            // partitions", HTTP 500); v0.0.40 and v0.0.41 refuse a UNIX timestamp as
            // `update_time` (HTTP 422, "Parsing of … for timestamp failed", measured on 24.11):
            // every node, as without `since`.
            Err(SlurmError::Rejected { errors, .. })
                if since.is_some()
                    && errors.iter().any(|e| {
                        e.description.contains("query partitions")
                            || e.description.contains("for timestamp failed")
                    }) =>
            {
                tracing::debug!("slurmrestd failed an incremental node list; listing all nodes");
                let result = dispatch!(dialect, self, |api, c| api.nodes(&c, None).await);
                self.forget_unserved(result)
            }
            Err(error) => self.forget_unserved(Err(error)),
        }
    }

    /// One node. An unknown node is `NotFound` (slurmrestd answers 200 without `nodes`).
    pub async fn node(&self, name: &str) -> Result<Node, SlurmError> {
        let dialect = self.dialect().await?;
        let result = dispatch!(dialect, self, |api, c| api.node(&c, name).await);
        self.forget_unserved(result)?
            .into_iter()
            .find(|n| n.name == name)
            .ok_or_else(|| SlurmError::NotFound {
                kind: "node",
                name: name.to_owned(),
            })
    }

    /// Set DRAIN with `reason` (jobs keep running; no new ones start).
    pub async fn drain_node(&self, name: &str, reason: &str) -> Result<(), SlurmError> {
        if reason.trim().is_empty() {
            return Err(SlurmError::InvalidRequest {
                detail: "Slurm requires a reason to drain a node".into(),
            });
        }
        let dialect = self.dialect().await?;
        let result = dispatch!(dialect, self, |api, c| api
            .update_node(&c, "drain_node", name, &["DRAIN"], Some(reason))
            .await);
        self.forget_unserved(result)
    }

    /// Clear DRAIN/DOWN. A node that is not drained or down gives `InvalidNodeState`.
    pub async fn resume_node(&self, name: &str) -> Result<(), SlurmError> {
        let dialect = self.dialect().await?;
        let result = dispatch!(dialect, self, |api, c| api
            .update_node(&c, "resume_node", name, &["RESUME"], None)
            .await);
        self.forget_unserved(result)
    }

    /// Remove a (dynamic) node's record. A node still running jobs gives `NodeBusy`.
    pub async fn delete_node(&self, name: &str) -> Result<(), SlurmError> {
        let dialect = self.dialect().await?;
        let result = dispatch!(dialect, self, |api, c| api.delete_node(&c, name).await);
        self.forget_unserved(result)
    }

    pub async fn partitions(&self) -> Result<Vec<Partition>, SlurmError> {
        let dialect = self.dialect().await?;
        let result = dispatch!(dialect, self, |api, c| api.partitions(&c).await);
        self.forget_unserved(result)
    }

    /// Submit a batch job. Never retried: the caller must look for its tag before trying again.
    pub async fn submit_job(&self, request: &SubmitRequest) -> Result<Submitted, SlurmError> {
        let dialect = self.dialect().await?;
        let result = dispatch!(dialect, self, |api, c| api.submit_job(&c, request).await);
        self.forget_unserved(result)
    }

    /// Agree on the REST API version now, if not yet: a caller that must bound when its next
    /// request leaves (a submit right after the leader Lease was read) negotiates first.
    pub async fn ensure_version(&self) -> Result<(), SlurmError> {
        self.dialect().await.map(drop)
    }

    /// slurmctld's clock as it answered `/diag` (whole seconds), and this machine's clock once
    /// the answer came: the two clocks may differ by minutes.
    pub async fn controller_clock(&self) -> Result<ClockReading, SlurmError> {
        let dialect = self.dialect().await?;
        let result = dispatch!(dialect, self, |api, c| api.diag(&c, false).await);
        let answered = Utc::now();
        let info = self.forget_unserved(result)?;
        Ok(ClockReading {
            answered,
            controller: info.controller_time,
        })
    }

    /// One job's records: one for a plain job, one per task for an array (by its array job id).
    pub async fn job(&self, job_id: u32) -> Result<Vec<Job>, SlurmError> {
        let dialect = self.dialect().await?;
        let result = dispatch!(dialect, self, |api, c| api.job(&c, job_id).await);
        let jobs = self.forget_unserved(result)?;
        if jobs.is_empty() {
            return Err(SlurmError::NotFound {
                kind: "job",
                name: job_id.to_string(),
            });
        }
        Ok(jobs)
    }

    /// All jobs slurmctld holds, or `Unchanged` when none changed since `since`.
    pub async fn jobs(&self, since: Option<i64>) -> Result<Changes<Job>, SlurmError> {
        let dialect = self.dialect().await?;
        let result = dispatch!(dialect, self, |api, c| api.jobs(&c, since).await);
        match result {
            Err(SlurmError::NotModified { .. }) if since.is_some() => Ok(Changes::Unchanged),
            other => self.forget_unserved(other),
        }
    }

    /// slurmdbd's records of `job_id` (several when slurmctld reused the id); `None` when this
    /// slurmrestd serves no accounting (started without its slurmdbd plugin, or the cluster has
    /// no slurmdbd). For jobs slurmctld no longer holds (`MinJobAge`).
    pub async fn accounting_job(&self, job_id: u32) -> Result<Option<Vec<Job>>, SlurmError> {
        let dialect = self.dialect().await?;
        let answer = accounting(dispatch!(dialect, self, |api, c| api
            .accounting_job(&c, job_id)
            .await));
        self.served_without_accounting(answer).await
    }

    /// slurmdbd's records of the jobs named `name` (the tag lookup for jobs slurmctld no longer
    /// holds); `None` when this slurmrestd serves no accounting. A name with a comma is refused
    /// unsent: slurmdbd would read it as a list of names, everyone's jobs of each. With `since`,
    /// only jobs that ended at or after it, or have not ended (slurmdbd's `start_time`, on its
    /// own clock; measured on 24.11: a job that ended before it is left out, a running one
    /// submitted before it is not): a name's whole history can be large. Jobs not eligible
    /// yet (held, waiting on a dependency or a begin time) are in the answer too: the window
    /// is on their submit time (`usage_time_as_submit_time`), where slurmdbd would otherwise
    /// leave them out of any search by name (measured on 24.11, 2026-12-06).
    ///
    /// With `user`, only that Slurm user's jobs, chosen by slurmdbd: anyone can name jobs alike,
    /// and another user's thousands of them must not make the answer too large to read (a
    /// SlurmJob would wait on it for ever). A slurmrestd that cannot resolve the user name
    /// (HTTP 422, "Unable to resolve user", measured on 24.11) is asked again without it.
    pub async fn accounting_jobs_named(
        &self,
        name: &str,
        since: Option<DateTime<Utc>>,
        user: Option<&str>,
    ) -> Result<Option<Vec<Job>>, SlurmError> {
        for (what, text) in [("job name", Some(name)), ("user name", user)] {
            if let Some(text) = text.filter(|t| t.contains(',')) {
                return Err(SlurmError::InvalidRequest {
                    detail: format!(
                        "{what} {text:?} contains a comma, which accounting reads as a list"
                    ),
                });
            }
        }
        let dialect = self.dialect().await?;
        let answer = accounting(dispatch!(dialect, self, |api, c| api
            .accounting_jobs_named(&c, name, since, user)
            .await));
        match answer {
            Err(error) if user.is_some() && unresolved_user(&error) => {
                tracing::warn!(
                    user,
                    %error,
                    "slurmrestd cannot resolve the Slurm user: searching accounting by job name for every user's jobs"
                );
                let answer = accounting(dispatch!(dialect, self, |api, c| api
                    .accounting_jobs_named(&c, name, since, None)
                    .await));
                self.served_without_accounting(answer).await
            }
            other => self.served_without_accounting(other).await,
        }
    }

    /// An accounting answer of "not served" holds only when the same version's slurmctld paths
    /// are served: a plain 404 also comes from a proxy in front of a slurmrestd that is
    /// restarting, or from one that no longer serves this version. Read as "no accounting",
    /// a job's end would never be recorded and a lost submit would be judged without
    /// slurmdbd; so the answer is checked with a ping, whose failure is returned instead (and
    /// renegotiates the version when it is the one not served).
    async fn served_without_accounting(
        &self,
        answer: Result<Option<Vec<Job>>, SlurmError>,
    ) -> Result<Option<Vec<Job>>, SlurmError> {
        if let Ok(None) = answer {
            self.ping().await?;
        }
        answer
    }

    /// Just the states of the given jobs, in one request. Unknown ids are left out of the answer.
    pub async fn jobs_state(&self, job_ids: &[u32]) -> Result<Vec<JobStateEntry>, SlurmError> {
        if job_ids.is_empty() {
            return Ok(Vec::new());
        }
        // Repeated `job_id` parameters: slurmrestd rejects the spec's CSV form.
        let ids: Vec<String> = job_ids.iter().map(u32::to_string).collect();
        let dialect = self.dialect().await?;
        let result = dispatch!(dialect, self, |api, c| api.jobs_state(&c, Some(&ids)).await);
        match result {
            Err(SlurmError::UnsupportedVersion { .. }) => {
                self.states_from_job_list(Some(job_ids)).await
            }
            other => self.job_states_served(other),
        }
    }

    /// An answer of `/jobs/state/` itself: served now (slurmrestd upgraded under the same API
    /// version), whatever an earlier call found.
    fn job_states_served<T>(&self, answer: Result<T, SlurmError>) -> Result<T, SlurmError> {
        if answer.is_ok() {
            *self.no_job_states.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
        answer
    }

    /// Whether slurmrestd serves `/jobs/state/`, as far as known: without it, each call of
    /// [`Self::jobs_state`] reads the whole job list, so the poller lists every job once a cycle
    /// rather than asking about a few jobs several times.
    pub fn serves_job_states(&self) -> bool {
        let missing = *self.no_job_states.lock().unwrap_or_else(|p| p.into_inner());
        missing.is_none() || missing != self.negotiation.current()
    }

    /// The states of ALL jobs slurmctld holds, in one request (`/jobs/state/` without ids): about
    /// 80 bytes per job where `/jobs` sends about 8 KiB. A pending array appears once per task
    /// still to run, under its meta record's id.
    pub async fn all_job_states(&self) -> Result<Vec<JobStateEntry>, SlurmError> {
        let dialect = self.dialect().await?;
        let result = dispatch!(dialect, self, |api, c| api.jobs_state(&c, None).await);
        match result {
            Err(SlurmError::UnsupportedVersion { .. }) => self.states_from_job_list(None).await,
            other => self.job_states_served(other),
        }
    }

    /// `/jobs/state/` is newer than some releases that serve v0.0.40 and v0.0.41 (Slurm 24.11's
    /// plugins serve it; older slurmrestds answer 404): the states then come from the full
    /// job list, which every version serves.
    /// `wanted`: as `/jobs/state/?job_id=` answers them, the jobs with these ids and, for an
    /// array's id, every task of it; `None`: every job.
    async fn states_from_job_list(
        &self,
        wanted: Option<&[u32]>,
    ) -> Result<Vec<JobStateEntry>, SlurmError> {
        tracing::debug!("slurmrestd does not serve /jobs/state/; reading states from /jobs");
        *self.no_job_states.lock().unwrap_or_else(|p| p.into_inner()) = self.negotiation.current();
        let mut jobs = self.jobs(None).await?.into_items().unwrap_or_default();
        if let Some(ids) = wanted {
            jobs.retain(|job| {
                ids.contains(&job.job_id) || job.array_job_id.is_some_and(|a| ids.contains(&a))
            });
        }
        Ok(states_of(jobs))
    }

    /// slurmctld's RPC counters by message type (`sdiag`): what polling costs slurmctld.
    pub async fn rpc_stats(&self) -> Result<Vec<RpcStats>, SlurmError> {
        let dialect = self.dialect().await?;
        let result = dispatch!(dialect, self, |api, c| api.rpc_stats(&c).await);
        self.forget_unserved(result)
    }

    /// Change fields of a job in place, as this client's user: slurmctld allows a user what
    /// `scontrol update job` allows them (lower a running job's time limit, hold and release
    /// their own pending job, ...). An ignored field is an error, never a silent success.
    pub async fn update_job(&self, job_id: u32, update: &JobUpdate) -> Result<(), SlurmError> {
        let dialect = self.dialect().await?;
        let result = dispatch!(dialect, self, |api, c| api
            .update_job(&c, job_id, update)
            .await);
        self.forget_unserved(result)
    }

    /// Cancel a job (SIGTERM, then SIGKILL after KillWait). Slurm answers 200 even when it did
    /// not: a finished job gives `AlreadyFinished`, an unknown one `NotFound`.
    pub async fn cancel_job(&self, job_id: u32) -> Result<(), SlurmError> {
        let dialect = self.dialect().await?;
        let result = dispatch!(dialect, self, |api, c| api.cancel_job(&c, job_id).await);
        self.forget_unserved(result)
    }
}

/// An accounting answer: a path slurmrestd does not serve (404 without a Slurm error number,
/// which the facade reads as an unsupported version) means the cluster has no accounting here.
/// slurmrestd refused a query for naming a user it cannot resolve: 24.11 answers 422 with
/// `{"description": "Unable to resolve user: …", "error_number": 2166, "source": "#/users[0]/"}`.
fn unresolved_user(error: &SlurmError) -> bool {
    matches!(error, SlurmError::Rejected { errors, .. }
    if errors.iter().any(|e| {
        e.source.starts_with("#/users") || e.description.contains("Unable to resolve user")
    }))
}

fn accounting(result: Result<Vec<Job>, SlurmError>) -> Result<Option<Vec<Job>>, SlurmError> {
    match result {
        Ok(jobs) => Ok(Some(jobs)),
        Err(SlurmError::UnsupportedVersion { .. }) => Ok(None),
        Err(error) => Err(error),
    }
}

/// slurmrestd names the data parser that rendered every JSON answer (`meta.plugin.data_parser`,
/// e.g. `data_parser/v0.0.42`). Anything but the version asked for means the answer's shape is
/// not the one the generated types describe. A missing name is refused too: every slurmrestd
/// sends it (24.11 and 26.05 alike), so an answer without it did not come from one, and calling
/// it supported would be a guess.
fn check_data_parser(
    endpoint: &str,
    version: ApiVersion,
    data_parser: &str,
) -> Result<(), SlurmError> {
    let unsupported = |detail: String| SlurmError::UnsupportedVersion {
        endpoint: endpoint.to_owned(),
        detail,
    };
    if data_parser.is_empty() {
        return Err(unsupported(format!(
            "its answer names no data_parser where {version} was asked"
        )));
    }
    let named = data_parser.rsplit('/').next().unwrap_or(data_parser);
    if named == version.as_str() {
        Ok(())
    } else {
        // The name is from the answer: bounded, like anything of an answer an error repeats.
        Err(unsupported(format!(
            "it answered with {} where {version} was asked",
            shortened(data_parser, 64)
        )))
    }
}

/// The most served versions an `UnsupportedVersion` message lists.
const MAX_NAMED_VERSIONS: usize = 12;

/// What to tell the admin when no version fits: what slurmrestd serves (when its `/openapi/v3`
/// said), what was pinned or what the operator speaks, and what to change.
fn no_common_version(pinned: Option<ApiVersion>, served: Option<&[String]>) -> String {
    let served_text = match served {
        Some([]) => "no REST API version its /openapi/v3 names".to_owned(),
        // From the answer: bounded in count and length, like anything of an answer a status
        // repeats.
        Some(list) => {
            let mut text = list
                .iter()
                .take(MAX_NAMED_VERSIONS)
                .map(|v| shortened(v, 16))
                .collect::<Vec<_>>()
                .join(", ");
            if list.len() > MAX_NAMED_VERSIONS {
                text.push_str(&format!(" and {} more", list.len() - MAX_NAMED_VERSIONS));
            }
            text
        }
        None => "a list of versions that could not be read (/openapi/v3)".to_owned(),
    };
    match pinned {
        Some(version) => format!(
            "spec.restApiVersion pins {version}, which this slurmrestd does not serve (it serves \
             {served_text}); pin a version it serves or set auto"
        ),
        None => format!(
            "this slurmrestd serves {served_text}; the operator speaks {}: run a Slurm release \
             (or load a data_parser plugin) that serves one of them",
            ApiVersion::spoken()
        ),
    }
}

/// The `/jobs/state/` entries of full job records, as slurmrestd itself lists them: each under
/// the id of its own record (an array task's, not the array's: the poller files a task's
/// state under the record it fetched, and asks for it by that id).
fn states_of(jobs: Vec<Job>) -> Vec<JobStateEntry> {
    jobs.into_iter()
        .map(|job| JobStateEntry {
            job_id: job.job_id,
            array_task_id: job.array_task_id.filter(|_| job.array_job_id.is_some()),
            state: job.state,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unserved_accounting_path_means_no_accounting_other_errors_stay() {
        let unserved = SlurmError::UnsupportedVersion {
            endpoint: "http://127.0.0.1:6820".into(),
            detail: "404 Unable find requested URL".into(),
        };
        assert_eq!(accounting(Err(unserved)).ok(), Some(None));
        assert_eq!(accounting(Ok(Vec::new())).ok(), Some(Some(Vec::new())));
        let down = SlurmError::Timeout {
            operation: "accounting_job",
            timeout: std::time::Duration::from_secs(1),
        };
        assert_eq!(
            accounting(Err(down)).err().map(|e| e.category()),
            Some("Timeout")
        );
    }

    #[test]
    fn only_the_data_parser_asked_for_is_accepted() {
        let endpoint = "http://slurm.example:6820";
        for version in ApiVersion::ALL {
            assert!(check_data_parser(endpoint, version, &version.data_parser()).is_ok());
        }
        let v42 = ApiVersion::V0_0_42;
        for bad in [
            "",
            "data_parser/v0.0.41",
            "data_parser/v0.0.420",
            "data_parser/xv0.0.42",
            "v0.0.43",
        ] {
            let err = check_data_parser(endpoint, v42, bad).unwrap_err();
            assert_eq!(err.category(), "UnsupportedVersion", "{bad:?}: {err}");
            assert!(err.to_string().contains(endpoint), "{err}");
        }
    }

    #[test]
    fn no_common_version_says_what_is_served_and_what_to_change() {
        let served = ["v0.0.38".to_owned(), "v0.0.39".to_owned()];
        let text = no_common_version(None, Some(&served));
        assert!(text.contains("serves v0.0.38, v0.0.39"), "{text}");
        assert!(text.contains("speaks v0.0.40 to v0.0.45"), "{text}");

        let served = [
            "v0.0.40".to_owned(),
            "v0.0.41".to_owned(),
            "v0.0.42".to_owned(),
        ];
        let text = no_common_version(Some(ApiVersion::V0_0_44), Some(&served));
        assert!(text.contains("pins v0.0.44"), "{text}");
        assert!(text.contains("serves v0.0.40, v0.0.41, v0.0.42"), "{text}");
        assert!(text.contains("restApiVersion"), "{text}");

        let text = no_common_version(None, None);
        assert!(text.contains("could not be read"), "{text}");
        // A hostile list is bounded per entry and in count.
        let long = ["v".repeat(500)];
        assert!(no_common_version(None, Some(&long)).len() < 300);
        let many: Vec<String> = (0..5000).map(|n| format!("v0.0.{n}")).collect();
        let text = no_common_version(None, Some(&many));
        assert!(text.len() < 400 && text.contains("and 4988 more"), "{text}");
    }
}
