//! `SlurmClient`: the one door to slurmrestd. Everything above it speaks domain types
//! (`super::types`) and `SlurmError`; the generated client and its types stay in here and in
//! `convert`.

use std::sync::Arc;

use backon::Retryable;
use progenitor_client::{Error as ProgenitorError, ResponseValue};

use super::auth::Credentials;
use super::config::ClientConfig;
use super::convert::{self, Envelope};
use super::error::{ApiError, SlurmError, Subject, classify, decode_error, shortened};
use super::generated::Client as Api;
use super::transport::{self, Exchange, RequestObserver, Transport};
use super::types::{
    Changes, ClusterInfo, Job, JobStateEntry, Node, Partition, SubmitRequest, Submitted,
};
use super::version::API_VERSION;

/// A client for one slurmrestd. Cheap to clone; clones share connections and credentials.
#[derive(Clone)]
pub struct SlurmClient {
    api: Arc<Api>,
    config: Arc<ClientConfig>,
}

impl std::fmt::Debug for SlurmClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlurmClient")
            .field("endpoint", &self.config.endpoint.as_str())
            .finish_non_exhaustive()
    }
}

/// Whether a call may be repeated after a transient failure without changing its effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Idempotency {
    Idempotent,
    /// Submits: a retry after a lost answer could create a second job.
    Once,
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
        let api = Api::new_with_client(
            &config.base_url(),
            http,
            Arc::new(Transport::new(
                credentials,
                observer,
                config.max_response_bytes,
            )),
        );
        Ok(Self {
            api: Arc::new(api),
            config: Arc::new(config),
        })
    }

    pub fn endpoint(&self) -> &url::Url {
        &self.config.endpoint
    }

    /// A client for the same slurmrestd (the same connections, settings and request observer)
    /// whose requests act as Slurm user `user`: tokens minted for that user with the same key
    /// ([`Credentials::for_user`]). How a tenant's job runs as the tenant's user.
    pub fn as_user(&self, user: &str) -> Result<Self, SlurmError> {
        let transport = progenitor_client::ClientInfo::inner(&*self.api);
        let credentials = transport.credentials().for_user(user)?;
        let http = progenitor_client::ClientInfo::client(&*self.api).clone();
        let api = Api::new_with_client(
            &self.config.base_url(),
            http,
            Arc::new(Transport::new(
                Arc::new(credentials),
                transport.observer.clone(),
                self.config.max_response_bytes,
            )),
        );
        Ok(Self {
            api: Arc::new(api),
            config: Arc::clone(&self.config),
        })
    }

    /// The Slurm user this client's requests act as, when the credentials say (a minted token's
    /// user, or a ready token's `sun` claim): the user a job it submits runs as.
    pub fn user(&self) -> Option<String> {
        progenitor_client::ClientInfo::inner(&*self.api)
            .credentials()
            .user()
            .map(str::to_owned)
    }

    /// Swap the credentials used from the next request on (key or token rotation).
    pub fn set_credentials(&self, credentials: Arc<Credentials>) {
        progenitor_client::ClientInfo::inner(&*self.api).set_credentials(credentials);
    }

    /// Whether the primary slurmctld answers. Does NOT prove the token is valid (`/ping` does not
    /// check it); use [`Self::cluster_info`] for that.
    pub async fn ping(&self) -> Result<bool, SlurmError> {
        let resp = self
            .call("ping", Subject::None, Idempotency::Idempotent, || {
                self.api.slurm_v0042_get_ping()
            })
            .await?;
        Ok(convert::controller_responding(&resp))
    }

    /// SlurmCluster identity, release and API version, through `/diag` and `/ping`. `/diag` checks the
    /// token, so success here means the credentials work.
    pub async fn cluster_info(&self) -> Result<ClusterInfo, SlurmError> {
        let diag = self
            .call("diag", Subject::None, Idempotency::Idempotent, || {
                self.api.slurm_v0042_get_diag()
            })
            .await?;
        let responding = self.ping().await?;
        let info = convert::cluster_info(&diag, responding);
        check_data_parser(self.config.endpoint.as_str(), &info.data_parser)?;
        Ok(info)
    }

    /// All nodes, or `Unchanged` when nothing changed since `since` (a previous `as_of`).
    ///
    /// Slurm 24.11's slurmrestd answers `update_time=T` with HTTP 500 "Unable to query
    /// partitions" when nodes changed since T but partitions did not (it passes T on to its
    /// partition query, which reports "no change" as a failure; 26.05 answers fine): the list is
    /// then asked again without `update_time`, which is what a working answer would have held.
    pub async fn nodes(&self, since: Option<i64>) -> Result<Changes<Node>, SlurmError> {
        let since_text = since.map(|t| t.to_string());
        let result = self
            .call("nodes", Subject::None, Idempotency::Idempotent, || {
                self.api.slurm_v0042_get_nodes(None, since_text.as_deref())
            })
            .await;
        match result {
            Ok(resp) => convert::node_changes(resp),
            Err(SlurmError::NotModified { .. }) if since.is_some() => Ok(Changes::Unchanged),
            Err(SlurmError::Rejected { errors, .. })
                if since.is_some()
                    && errors
                        .iter()
                        .any(|e| e.description.contains("query partitions")) =>
            {
                tracing::debug!("slurmrestd failed an incremental node list; listing all nodes");
                let resp = self
                    .call("nodes", Subject::None, Idempotency::Idempotent, || {
                        self.api.slurm_v0042_get_nodes(None, None)
                    })
                    .await?;
                convert::node_changes(resp)
            }
            Err(error) => Err(error),
        }
    }

    /// One node. An unknown node is `NotFound` (slurmrestd answers 200 without `nodes`).
    pub async fn node(&self, name: &str) -> Result<Node, SlurmError> {
        let subject = Subject::Node(name);
        let resp = self
            .call("node", subject, Idempotency::Idempotent, || {
                self.api.slurm_v0042_get_node(name, None, None)
            })
            .await?;
        convert::nodes(resp.nodes)
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
        let body = convert::node_update(&["DRAIN"], Some(reason));
        self.call(
            "drain_node",
            Subject::Node(name),
            Idempotency::Idempotent,
            || self.api.slurm_v0042_post_node(name, &body),
        )
        .await?;
        Ok(())
    }

    /// Clear DRAIN/DOWN. A node that is not drained or down gives `InvalidNodeState`.
    pub async fn resume_node(&self, name: &str) -> Result<(), SlurmError> {
        let body = convert::node_update(&["RESUME"], None);
        self.call(
            "resume_node",
            Subject::Node(name),
            Idempotency::Idempotent,
            || self.api.slurm_v0042_post_node(name, &body),
        )
        .await?;
        Ok(())
    }

    /// Remove a (dynamic) node's record. A node still running jobs gives `NodeBusy`.
    pub async fn delete_node(&self, name: &str) -> Result<(), SlurmError> {
        self.call(
            "delete_node",
            Subject::Node(name),
            Idempotency::Idempotent,
            || self.api.slurm_v0042_delete_node(name),
        )
        .await?;
        Ok(())
    }

    pub async fn partitions(&self) -> Result<Vec<Partition>, SlurmError> {
        let resp = self
            .call("partitions", Subject::None, Idempotency::Idempotent, || {
                self.api.slurm_v0042_get_partitions(None, None)
            })
            .await?;
        Ok(convert::partitions(resp))
    }

    /// Submit a batch job. Never retried: the caller must look for its tag before trying again.
    pub async fn submit_job(&self, request: &SubmitRequest) -> Result<Submitted, SlurmError> {
        let body = convert::submit_request(request)?;
        let resp = self
            .call("submit_job", Subject::None, Idempotency::Once, || {
                self.api.slurm_v0042_post_job_submit(&body)
            })
            .await?;
        convert::submitted(resp)
    }

    /// One job's records: one for a plain job, one per task for an array (by its array job id).
    pub async fn job(&self, job_id: u32) -> Result<Vec<Job>, SlurmError> {
        let id = job_id.to_string();
        let resp = self
            .call("job", Subject::Job(job_id), Idempotency::Idempotent, || {
                self.api.slurm_v0042_get_job(&id, None, None)
            })
            .await?;
        let jobs = convert::jobs(resp.jobs);
        if jobs.is_empty() {
            return Err(SlurmError::NotFound {
                kind: "job",
                name: id,
            });
        }
        Ok(jobs)
    }

    /// All jobs slurmctld holds, or `Unchanged` when none changed since `since`.
    pub async fn jobs(&self, since: Option<i64>) -> Result<Changes<Job>, SlurmError> {
        let since = since.map(|t| t.to_string());
        let result = self
            .call("jobs", Subject::None, Idempotency::Idempotent, || {
                self.api.slurm_v0042_get_jobs(None, since.as_deref())
            })
            .await;
        match result {
            Ok(resp) => convert::job_changes(resp),
            Err(SlurmError::NotModified { .. }) if since.is_some() => Ok(Changes::Unchanged),
            Err(error) => Err(error),
        }
    }

    /// slurmdbd's records of `job_id` (several when slurmctld reused the id); `None` when this
    /// slurmrestd serves no accounting (started without its slurmdbd plugin, or the cluster has
    /// no slurmdbd). For jobs slurmctld no longer holds (`MinJobAge`).
    pub async fn accounting_job(&self, job_id: u32) -> Result<Option<Vec<Job>>, SlurmError> {
        let id = job_id.to_string();
        let result = self
            .call(
                "accounting_job",
                Subject::Job(job_id),
                Idempotency::Idempotent,
                || self.api.slurmdb_v0042_get_job(&id),
            )
            .await;
        accounting(result.map(|resp| convert::accounting_jobs(resp.jobs)))
    }

    /// slurmdbd's records of the jobs named `name` (the tag lookup for jobs slurmctld no longer
    /// holds); `None` when this slurmrestd serves no accounting.
    pub async fn accounting_jobs_named(&self, name: &str) -> Result<Option<Vec<Job>>, SlurmError> {
        let result = self
            .call(
                "accounting_jobs",
                Subject::None,
                Idempotency::Idempotent,
                || {
                    self.api.slurmdb_v0042_get_jobs(
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        Some(name),
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                    )
                },
            )
            .await;
        accounting(result.map(|resp| convert::accounting_jobs(resp.jobs)))
    }

    /// Just the states of the given jobs, in one request. Unknown ids are left out of the answer.
    pub async fn jobs_state(&self, job_ids: &[u32]) -> Result<Vec<JobStateEntry>, SlurmError> {
        if job_ids.is_empty() {
            return Ok(Vec::new());
        }
        // Repeated `job_id` parameters: slurmrestd rejects the spec's CSV form.
        let ids: Vec<String> = job_ids.iter().map(u32::to_string).collect();
        let resp = self
            .call("jobs_state", Subject::None, Idempotency::Idempotent, || {
                self.api.slurm_v0042_get_jobs_state(Some(&ids))
            })
            .await?;
        Ok(convert::job_states(resp))
    }

    /// The states of ALL jobs slurmctld holds, in one request (`/jobs/state/` without ids): about
    /// 80 bytes per job where `/jobs` sends about 8 KiB. A pending array appears once per task
    /// still to run, under its meta record's id.
    pub async fn all_job_states(&self) -> Result<Vec<JobStateEntry>, SlurmError> {
        let resp = self
            .call("jobs_state", Subject::None, Idempotency::Idempotent, || {
                self.api.slurm_v0042_get_jobs_state(None)
            })
            .await?;
        Ok(convert::job_states(resp))
    }

    /// Cancel a job (SIGTERM, then SIGKILL after KillWait). Slurm answers 200 even when it did
    /// not: a finished job gives `AlreadyFinished`, an unknown one `NotFound`.
    pub async fn cancel_job(&self, job_id: u32) -> Result<(), SlurmError> {
        let id = job_id.to_string();
        let resp = self
            .call(
                "cancel_job",
                Subject::Job(job_id),
                Idempotency::Idempotent,
                || self.api.slurm_v0042_delete_job(&id, None, None),
            )
            .await?;
        let failures = convert::cancel_failures(&resp);
        if failures.is_empty() {
            Ok(())
        } else {
            Err(classify("cancel_job", 200, Subject::Job(job_id), failures))
        }
    }

    /// Run one generated call with retries (idempotent calls only) and turn whatever came back
    /// into a checked body or the right error.
    async fn call<'a, T, E, F, Fut>(
        &self,
        operation: &'static str,
        subject: Subject<'a>,
        idempotency: Idempotency,
        request: F,
    ) -> Result<T, SlurmError>
    where
        T: Envelope,
        E: Envelope,
        F: Fn() -> Fut,
        Fut: Future<Output = Result<ResponseValue<T>, ProgenitorError<E>>>,
    {
        let once = || async {
            let (result, exchange) = transport::observed(request()).await;
            self.check(operation, subject, result, exchange).await
        };
        match idempotency {
            Idempotency::Once => once().await,
            Idempotency::Idempotent => {
                once.retry(self.config.retry.backoff())
                    .when(SlurmError::worth_retrying_now)
                    .notify(|error, delay| {
                        tracing::debug!(operation, %error, ?delay, "retrying slurmrestd call");
                    })
                    .await
            }
        }
    }

    async fn check<T: Envelope, E: Envelope>(
        &self,
        operation: &'static str,
        subject: Subject<'_>,
        result: Result<ResponseValue<T>, ProgenitorError<E>>,
        mut exchange: Exchange,
    ) -> Result<T, SlurmError> {
        // Whatever the generated client made of it (progenitor has no case for 3xx), a redirect
        // is the answer: not followed, not retried.
        if let Some(location) = exchange.redirect_to.take() {
            return Err(SlurmError::Redirected {
                operation,
                status: exchange.status.unwrap_or_default(),
                location,
            });
        }
        match result {
            Ok(value) => {
                let status = value.status().as_u16();
                let body = value.into_inner();
                let errors = body.errors();
                // 200 with errors[] is a failure, except for slurmrestd's "No error" entries
                // (error_number 0), which go with a missing result (e.g. an unknown node).
                if errors.iter().any(|e| e.code != 0) {
                    return Err(classify(operation, status, subject, errors));
                }
                for warning in body.warnings() {
                    tracing::debug!(operation, warning, "slurmrestd warning");
                }
                Ok(body)
            }
            Err(ProgenitorError::ErrorResponse(value)) => {
                let status = value.status().as_u16();
                let errors = value.into_inner().errors();
                Err(self.status_error(operation, subject, status, errors))
            }
            Err(ProgenitorError::InvalidResponsePayload(bytes, error)) => {
                log_unexpected_body(operation, exchange.status, &bytes, Some(&error));
                match exchange.status {
                    Some(status) if (200..300).contains(&status) => {
                        Err(decode_error(operation, &error, Some(status)))
                    }
                    Some(status) => {
                        let errors = convert::errors_from_bytes(&bytes);
                        Err(self.status_error(operation, subject, status, errors))
                    }
                    None => Err(decode_error(operation, &error, None)),
                }
            }
            Err(ProgenitorError::UnexpectedResponse(response)) => {
                let status = response.status().as_u16();
                let bytes = match response.bytes().await {
                    Ok(bytes) => bytes,
                    Err(error) => match transport::body_refused(&error) {
                        Some(refused) => return Err(refused_body(operation, refused)),
                        None => Default::default(),
                    },
                };
                log_unexpected_body(operation, Some(status), &bytes, None);
                let errors = convert::errors_from_bytes(&bytes);
                Err(self.status_error(operation, subject, status, errors))
            }
            Err(ProgenitorError::ResponseBodyError(error)) => {
                match transport::body_refused(&error) {
                    Some(refused) => Err(refused_body(operation, refused)),
                    None => Err(self.transport_error(operation, error)),
                }
            }
            Err(ProgenitorError::CommunicationError(error)) => {
                Err(self.transport_error(operation, error))
            }
            Err(ProgenitorError::InvalidUpgrade(error)) => {
                Err(self.transport_error(operation, error))
            }
            Err(ProgenitorError::Custom(message)) => match exchange.auth_error {
                Some(error) => Err(SlurmError::Credentials(error)),
                None => Err(SlurmError::InvalidRequest { detail: message }),
            },
            Err(ProgenitorError::InvalidRequest(detail)) => {
                Err(SlurmError::InvalidRequest { detail })
            }
        }
    }

    fn status_error(
        &self,
        operation: &'static str,
        subject: Subject<'_>,
        status: u16,
        errors: Vec<ApiError>,
    ) -> SlurmError {
        if errors.iter().any(|e| e.code != 0) {
            return classify(operation, status, subject, errors);
        }
        // slurmrestd's own words only (`Envelope` keeps none from a body that is not its JSON);
        // never the body's bytes, which were logged at debug level where they arrived.
        let detail = errors
            .iter()
            .find(|e| !e.error.is_empty() || !e.description.is_empty())
            .map(ApiError::message)
            .unwrap_or_default();
        match status {
            // 401: no or unusable auth headers; 511: slurmrestd's answer to a bad or expired token.
            401 | 403 | 511 => SlurmError::Unauthorized { status, detail },
            304 => SlurmError::NotModified { operation },
            // slurmrestd says "not found" with a Slurm error number (an unknown job: 404 + 2017,
            // classified above; an unknown node: 200 without `nodes`). A 404 WITHOUT one is its
            // answer to a path it does not route, `text/plain` "Unable find requested URL": the
            // versioned path is not served. That holds for a job or node path too — reading it as
            // "job gone" or "node already deleted" would make callers act on a wrong fact.
            404 => SlurmError::UnsupportedVersion {
                endpoint: self.config.endpoint.to_string(),
                detail: format!("{API_VERSION} is not served ({operation}: HTTP 404)"),
            },
            _ => SlurmError::UnexpectedStatus {
                operation,
                status,
                body: detail,
            },
        }
    }

    fn transport_error(&self, operation: &'static str, error: reqwest::Error) -> SlurmError {
        let endpoint = self.config.endpoint.to_string();
        if error.is_timeout() {
            return SlurmError::Timeout {
                operation,
                timeout: self.config.request_timeout,
            };
        }
        let detail = error_chain(&error);
        if is_tls_error(&error) {
            return SlurmError::Tls { endpoint, detail };
        }
        SlurmError::Unreachable {
            endpoint,
            detail,
            source: Some(error),
        }
    }
}

/// The error for a body the transport stopped reading.
fn refused_body(operation: &'static str, refused: transport::BodyRefused) -> SlurmError {
    match refused {
        transport::BodyRefused::TooLarge { limit } => {
            SlurmError::ResponseTooLarge { operation, limit }
        }
        transport::BodyRefused::TooManyElements { bytes } => {
            SlurmError::TooManyElements { operation, bytes }
        }
    }
}

/// slurmrestd names the data parser that rendered every JSON answer (`meta.plugin.data_parser`,
/// e.g. `data_parser/v0.0.42`). Anything but the version this facade was generated for means the
/// answer's shape is not the one the generated types describe. A missing name is refused too:
/// every slurmrestd that serves v0.0.42 sends it (24.11 and 26.05 alike), so an answer without it
/// did not come from one, and calling it supported would be a guess.
/// An accounting answer: a path slurmrestd does not serve (404 without a Slurm error number,
/// which the facade reads as an unsupported version) means the cluster has no accounting here.
fn accounting(result: Result<Vec<Job>, SlurmError>) -> Result<Option<Vec<Job>>, SlurmError> {
    match result {
        Ok(jobs) => Ok(Some(jobs)),
        Err(SlurmError::UnsupportedVersion { .. }) => Ok(None),
        Err(error) => Err(error),
    }
}

fn check_data_parser(endpoint: &str, data_parser: &str) -> Result<(), SlurmError> {
    let unsupported = |detail: String| SlurmError::UnsupportedVersion {
        endpoint: endpoint.to_owned(),
        detail,
    };
    if data_parser.is_empty() {
        return Err(unsupported(format!(
            "its answer names no data_parser where {API_VERSION} was asked"
        )));
    }
    let version = data_parser.rsplit('/').next().unwrap_or(data_parser);
    if version == API_VERSION {
        Ok(())
    } else {
        // The name is from the answer: bounded, like anything of an answer an error repeats.
        Err(unsupported(format!(
            "it answered with {} where {API_VERSION} was asked",
            shortened(data_parser, 64)
        )))
    }
}

/// The most characters of an unexpected body the debug log shows.
const MAX_LOGGED_BODY_CHARS: usize = 256;

/// The first part of a body, for the debug log only: never for an error, whose text reaches
/// statuses and Events (an endpoint that is not slurmrestd must not be read back through them).
fn excerpt(bytes: &[u8]) -> String {
    shortened(String::from_utf8_lossy(bytes).trim(), MAX_LOGGED_BODY_CHARS)
}

/// Log, at debug level, the start of an answer the facade could not use as slurmrestd's, and
/// serde's full message about it: what the error itself leaves out, for whoever operates this.
fn log_unexpected_body(
    operation: &'static str,
    status: Option<u16>,
    bytes: &[u8],
    error: Option<&serde_json::Error>,
) {
    tracing::debug!(
        operation,
        status,
        bytes = bytes.len(),
        body = %excerpt(bytes),
        decode_error = error.map(tracing::field::display),
        "unexpected answer from slurmrestd's endpoint"
    );
}

/// The next cause of `error`. `io::Error::source` skips the error it wraps (it returns that
/// error's own source), which hides e.g. rustls errors inside hyper's io errors: look inside.
fn cause_of<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a (dyn std::error::Error + 'static)> {
    match error
        .downcast_ref::<std::io::Error>()
        .and_then(|io| io.get_ref())
    {
        Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
        None => error.source(),
    }
}

fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current = Some(error);
    while let Some(cause) = current {
        let text = cause.to_string();
        // Wrappers often repeat their cause's text; keep each distinct message once.
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        current = cause_of(cause);
    }
    parts.join(": ")
}

fn is_tls_error(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(cause) = current {
        if cause.is::<rustls::Error>() {
            return true;
        }
        current = cause_of(cause);
    }
    false
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
    fn tls_errors_are_found_inside_nested_io_errors() {
        let rustls = rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType);
        let inner = std::io::Error::new(std::io::ErrorKind::InvalidData, rustls);
        let outer = std::io::Error::other(inner);
        assert!(is_tls_error(&outer));
        assert!(
            error_chain(&outer).contains("InvalidContentType"),
            "{}",
            error_chain(&outer)
        );
        let plain =
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        assert!(!is_tls_error(&plain));
    }

    #[test]
    fn only_the_generated_data_parser_is_supported() {
        let endpoint = "http://slurm.example:6820";
        assert!(check_data_parser(endpoint, "data_parser/v0.0.42").is_ok());
        for bad in [
            "",
            "data_parser/v0.0.41",
            "data_parser/v0.0.420",
            "data_parser/xv0.0.42",
            "v0.0.43",
        ] {
            let err = check_data_parser(endpoint, bad).unwrap_err();
            assert_eq!(err.category(), "UnsupportedVersion", "{bad:?}: {err}");
            assert!(err.to_string().contains(endpoint), "{err}");
        }
    }

    #[test]
    fn excerpts_are_bounded_and_single_line() {
        assert_eq!(excerpt(b"  short  "), "short");
        let long = "x".repeat(1000);
        assert_eq!(excerpt(long.as_bytes()).chars().count(), 257);
        assert_eq!(excerpt(b"a\nb\r\x1b[31m"), "a\\nb\\r\\u{1b}[31m");
    }
}
