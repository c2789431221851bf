//! Where slurmrestd is and how to talk to it: endpoint, TLS, timeouts, retries.

use std::time::Duration;

use backon::ExponentialBuilder;
use url::Url;

use super::error::SlurmError;
use super::version::ApiVersion;

/// TLS settings for an `https://` endpoint. Verification is on unless explicitly disabled.
#[derive(Clone, Default)]
pub struct TlsOptions {
    /// PEM bundle of the CA(s) to trust instead of the system roots.
    pub ca_pem: Option<Vec<u8>>,
    /// Accept any certificate. Only for tests and emergencies; logged loudly when used.
    pub insecure_skip_verify: bool,
}

impl std::fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsOptions")
            .field(
                "ca_pem",
                &self
                    .ca_pem
                    .as_ref()
                    .map(|pem| format!("{} bytes", pem.len())),
            )
            .field("insecure_skip_verify", &self.insecure_skip_verify)
            .finish()
    }
}

/// How to reach one slurmrestd.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Base URL, e.g. `http://127.0.0.1:6820` (any path prefix is kept: slurmrestd behind a proxy).
    pub endpoint: Url,
    pub tls: TlsOptions,
    /// Per-request timeout.
    pub request_timeout: Duration,
    /// Timeout of a listing of every job (`/jobs/state/` without ids, `/jobs`), whose answer
    /// grows with the whole queue; never shorter than `request_timeout`. Default
    /// [`DEFAULT_LISTING_TIMEOUT`].
    pub listing_timeout: Duration,
    pub connect_timeout: Duration,
    /// Retries of idempotent calls on transient errors.
    pub retry: RetryPolicy,
    /// The most bytes of one response body the client reads before giving up with
    /// `SlurmError::ResponseTooLarge`. Without a bound, a broken or hostile slurmrestd (or a proxy
    /// in front of it) could stream an endless body into memory faster than `request_timeout`
    /// ends it. Default [`DEFAULT_MAX_RESPONSE_BYTES`].
    pub max_response_bytes: u64,
    /// Whether a plain `http://` endpoint may be used. Over plain HTTP every request carries its
    /// JWT in clear. Default [`DEFAULT_ALLOW_PLAINTEXT`]; see [`ClientConfig::allow_plaintext`].
    pub allow_plaintext: bool,
    /// The REST API version to speak, when pinned; `None` (the default) negotiates the newest
    /// one both sides speak on first use (`SlurmClient::negotiate`).
    pub api_version: Option<ApiVersion>,
}

/// Whether a new `ClientConfig` accepts an `http://` endpoint without being told.
// Refused unless the caller says so: a SlurmCluster through `allowInsecureHttp`.
pub const DEFAULT_ALLOW_PLAINTEXT: bool = false;

/// 32 MiB. The largest answers are the job listings: `/jobs/state/` at ~80 bytes a job (the
/// poller's every cycle: ~400 000 jobs fit), and `/jobs` at ~8 KiB a job (~4 000 fit), which the
/// poller asks for only with at most 1 000 jobs (`full_list_max_jobs`, ~8 MiB). 4x headroom over
/// that, yet small enough that a few clusters answering badly cannot exhaust the operator's memory.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 32 * 1024 * 1024;

/// 5 minutes. slurmrestd builds a listing of every job in proportion to the queue, measured on
/// 2 cores at 100 000 jobs: 15–24 s (Slurm 24.11), 42–82 s (26.05). Cut at `request_timeout`
/// (30 s), such a listing never completed, so the poller never synced; and slurmrestd, which
/// cannot tell that the client left, went on building every abandoned answer while the next try
/// asked for another (two cores busy for minutes, 2026-11-29).
pub const DEFAULT_LISTING_TIMEOUT: Duration = Duration::from_secs(300);

/// Bounded, jittered exponential backoff for idempotent calls. Submits are never retried.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub max_retries: usize,
    pub min_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 2,
            min_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
        }
    }
}

impl RetryPolicy {
    /// No retries at all (e.g. for probes that report failure themselves).
    pub fn none() -> Self {
        Self {
            max_retries: 0,
            ..Self::default()
        }
    }

    pub(crate) fn backoff(&self) -> ExponentialBuilder {
        ExponentialBuilder::default()
            .with_min_delay(self.min_delay)
            .with_max_delay(self.max_delay)
            .with_max_times(self.max_retries)
            .with_jitter()
    }
}

impl ClientConfig {
    /// Parse and check an endpoint URL; defaults for everything else.
    pub fn new(endpoint: &str) -> Result<Self, SlurmError> {
        // Named without what may be credentials typed into it (the error reaches logs).
        let invalid = |detail: &str| SlurmError::InvalidEndpoint {
            endpoint: crate::slurm::location_without_secrets(endpoint),
            detail: detail.to_owned(),
        };
        let mut url = Url::parse(endpoint.trim()).map_err(|e| invalid(&e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid("the scheme must be http or https"));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(invalid("the URL has no host"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(invalid("the URL must not have a query or fragment"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(invalid(
                "credentials do not belong in the URL; use the auth settings",
            ));
        }
        // progenitor joins "{baseurl}{path}" with paths that start with '/': no trailing slash.
        let trimmed = url.path().trim_end_matches('/').to_owned();
        url.set_path(&trimmed);
        Ok(Self {
            endpoint: url,
            tls: TlsOptions::default(),
            request_timeout: Duration::from_secs(30),
            listing_timeout: DEFAULT_LISTING_TIMEOUT,
            connect_timeout: Duration::from_secs(5),
            retry: RetryPolicy::default(),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            allow_plaintext: DEFAULT_ALLOW_PLAINTEXT,
            api_version: None,
        })
    }

    /// Allow (or refuse) a plain `http://` endpoint. A client for a refused one is not built
    /// (`SlurmClient::new` fails with `InvalidEndpoint`). No effect on `https://` endpoints.
    pub fn allow_plaintext(mut self, allow: bool) -> Self {
        self.allow_plaintext = allow;
        self
    }

    /// Whether the endpoint is plain `http://` (requests and their tokens unencrypted).
    pub fn is_plaintext(&self) -> bool {
        self.endpoint.scheme() == "http"
    }

    /// Refuse a plain `http://` endpoint unless it was allowed. `SlurmClient::new` calls this;
    /// callers may call it earlier to report the setting as invalid before building anything.
    pub fn check_plaintext(&self) -> Result<(), SlurmError> {
        if self.is_plaintext() && !self.allow_plaintext {
            return Err(SlurmError::InvalidEndpoint {
                endpoint: self.endpoint.to_string(),
                detail: "plain http would send the JWT unencrypted; use an https endpoint, or \
                         allow plain http explicitly"
                    .into(),
            });
        }
        Ok(())
    }

    pub fn with_tls(mut self, tls: TlsOptions) -> Self {
        self.tls = tls;
        self
    }

    /// Speak only `version` (`None`: negotiate).
    pub fn with_api_version(mut self, version: Option<ApiVersion>) -> Self {
        self.api_version = version;
        self
    }

    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Bound the bytes read of any one response body (see `max_response_bytes`).
    pub fn with_max_response_bytes(mut self, limit: u64) -> Self {
        self.max_response_bytes = limit;
        self
    }

    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    pub fn with_listing_timeout(mut self, timeout: Duration) -> Self {
        self.listing_timeout = timeout;
        self
    }

    /// The base URL as progenitor wants it (no trailing slash).
    pub(crate) fn base_url(&self) -> String {
        self.endpoint.as_str().trim_end_matches('/').to_owned()
    }

    pub(crate) fn http_client(&self) -> Result<reqwest::Client, SlurmError> {
        self.check_plaintext()?;
        crate::tls::install_crypto_provider();
        let mut builder = reqwest::Client::builder()
            // A redirect would carry the token to a host the admin did not name (and turn the
            // operator into a proxy to it): a 3xx answer is an error (`SlurmError::Redirected`).
            .redirect(reqwest::redirect::Policy::none())
            // Nor does a proxy from the environment (`HTTP(S)_PROXY`, `ALL_PROXY`: a chart's
            // `extraEnv`, a platform's injected egress proxy) see the requests: over plain http
            // it would read every token and script. The endpoint is the only hop.
            .no_proxy()
            .timeout(self.request_timeout)
            .connect_timeout(self.connect_timeout)
            .user_agent(concat!("slurm-operator/", env!("CARGO_PKG_VERSION")));
        if self.endpoint.scheme() == "https" {
            builder = builder.https_only(true);
            if let Some(pem) = &self.tls.ca_pem {
                let certs = reqwest::Certificate::from_pem_bundle(pem).map_err(|e| {
                    SlurmError::InvalidCa {
                        detail: e.to_string(),
                    }
                })?;
                if certs.is_empty() {
                    return Err(SlurmError::InvalidCa {
                        detail: "no PEM certificate found in the CA bundle".into(),
                    });
                }
                builder = builder.tls_certs_only(certs);
            }
            if self.tls.insecure_skip_verify {
                tracing::warn!(
                    endpoint = %self.endpoint,
                    "TLS certificate verification is DISABLED for this slurmrestd endpoint (insecureSkipVerify); \
                     anyone on the path can read and forge its traffic, JWTs included"
                );
                builder = builder.tls_danger_accept_invalid_certs(true);
            }
        }
        builder.build().map_err(|e| SlurmError::InvalidEndpoint {
            endpoint: self.endpoint.to_string(),
            detail: format!("cannot build the HTTP client: {e}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_checked_and_normalised() {
        assert_eq!(
            ClientConfig::new("http://127.0.0.1:6820")
                .unwrap()
                .base_url(),
            "http://127.0.0.1:6820"
        );
        assert_eq!(
            ClientConfig::new("http://127.0.0.1:6820/")
                .unwrap()
                .base_url(),
            "http://127.0.0.1:6820"
        );
        assert_eq!(
            ClientConfig::new("https://proxy.example/slurmrestd/")
                .unwrap()
                .base_url(),
            "https://proxy.example/slurmrestd"
        );
        for bad in [
            "",
            "127.0.0.1:6820",
            "ftp://x",
            "http://",
            "http://h/?a=b",
            "http://u:p@h/",
            "http://h/#x",
        ] {
            let err = ClientConfig::new(bad).unwrap_err();
            assert_eq!(err.category(), "InvalidEndpoint", "{bad:?}: {err}");
        }
        // A refused URL is named without the credentials typed into it (`check --url` prints
        // the error, a SlurmCluster's status shows it).
        for typed in [
            "https://admin:s3cret@slurm.example:6820",
            "https://slurm.example:6820/?token=s3cret",
            "admin:s3cret@slurm.example:6820",
        ] {
            let err = ClientConfig::new(typed).unwrap_err().to_string();
            assert!(!err.contains("s3cret"), "{err}");
        }
    }

    #[test]
    fn plain_http_is_refused_unless_allowed() {
        let refused = ClientConfig::new("http://slurm.example:6820")
            .unwrap()
            .allow_plaintext(false);
        assert!(refused.is_plaintext());
        let err = refused.http_client().unwrap_err();
        assert_eq!(err.category(), "InvalidEndpoint", "{err}");
        let text = err.to_string();
        assert!(
            text.contains("use an https endpoint") && text.contains("allow plain http"),
            "{text}"
        );

        let allowed = refused.allow_plaintext(true);
        assert!(allowed.check_plaintext().is_ok());
        allowed.http_client().unwrap();

        // https is not plain text, whatever the option says.
        let https = ClientConfig::new("https://slurm.example:6820")
            .unwrap()
            .allow_plaintext(false);
        assert!(!https.is_plaintext());
        https.http_client().unwrap();

        assert_eq!(
            ClientConfig::new("http://h").unwrap().allow_plaintext,
            DEFAULT_ALLOW_PLAINTEXT
        );
    }

    #[test]
    fn garbage_ca_bundle_is_an_error_not_a_silent_fallback() {
        let config = ClientConfig::new("https://slurm.example:6820")
            .unwrap()
            .with_tls(TlsOptions {
                ca_pem: Some(b"not a pem".to_vec()),
                insecure_skip_verify: false,
            });
        let err = config.http_client().unwrap_err();
        assert_eq!(err.category(), "InvalidCA", "{err}");
    }

    #[test]
    fn tls_options_debug_hides_the_bundle() {
        let tls = TlsOptions {
            ca_pem: Some(b"-----BEGIN CERTIFICATE-----".to_vec()),
            insecure_skip_verify: false,
        };
        assert!(!format!("{tls:?}").contains("BEGIN"));
    }
}
