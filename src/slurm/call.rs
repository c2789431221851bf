//! One slurmrestd call, whatever the REST API version: retries for idempotent calls, and one
//! place that turns what the generated client returned into a checked body or the right
//! [`SlurmError`]. The dialects (`super::dialect`) run every operation through [`Caller::call`].

use std::time::Duration;

use backon::Retryable;
use progenitor_client::{Error as ProgenitorError, ResponseValue};

use super::config::ClientConfig;
use super::error::{ApiError, SlurmError, Subject, classify, decode_error, shortened};
use super::identity::Identity;
use super::transport::{self, Exchange};
use super::types::Submitted;
use super::version::ApiVersion;

/// Every slurmrestd response carries `errors[]` and `warnings[]`, whatever its HTTP status.
///
/// Their texts are kept only when the body is slurmrestd's (its `meta` names a data_parser):
/// they end up in errors, statuses and Events, and an endpoint that is not slurmrestd must not
/// have its answers read back that way. From any other JSON only the error numbers are kept.
pub(crate) trait Envelope {
    fn errors(&self) -> Vec<ApiError>;
    fn warnings(&self) -> Vec<String>;
    /// The job a submit's answer says was made, errors or not.
    fn job_made(&self) -> Option<Submitted> {
        None
    }
    /// The Slurm cluster whose slurmrestd rendered the answer (`meta.slurm.cluster`).
    fn served_cluster(&self) -> Option<String> {
        None
    }
    /// A submit's answer: one not read as its type may still name the job made
    /// ([`made_in_bytes`]).
    const SUBMIT: bool = false;
}

/// Whether a call may be repeated after a transient failure without changing its effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Idempotency {
    Idempotent,
    /// Submits: a retry after a lost answer could create a second job.
    Once,
}

/// What a call needs besides the request: the client's settings and the version in use (for
/// messages). Cheap; made per call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caller<'a> {
    pub config: &'a ClientConfig,
    pub version: ApiVersion,
    /// Parses the error entries of a body progenitor could not decode as its declared type,
    /// with this version's types.
    pub errors_from_bytes: fn(&[u8]) -> Vec<ApiError>,
    /// How long each request may take: `config.request_timeout`, or for a listing of every job
    /// ([`Self::listing`]) `config.listing_timeout`.
    pub timeout: Duration,
    /// The Slurm cluster the client was confirmed to reach ([`Identity`]); `None` for the calls
    /// that find out whom the endpoint serves ([`Self::unchecked`]).
    pub identity: Option<&'a Identity>,
    /// Where an undecoded body says it was rendered (`meta.slurm.cluster`), with this
    /// version's types.
    pub cluster_from_bytes: fn(&[u8]) -> Option<String>,
    /// A request that changes something in Slurm ([`Self::write`]).
    pub writes: bool,
}

impl Caller<'_> {
    /// The same caller for a request whose answer grows with the whole queue: it gets the
    /// listing timeout (never shorter than the request timeout).
    pub(crate) fn listing(self) -> Self {
        Self {
            timeout: self.config.listing_timeout.max(self.config.request_timeout),
            ..self
        }
    }

    /// The same caller, taking answers from whichever cluster: for the calls that find out
    /// which one the endpoint serves (`/diag`, `/ping`).
    pub(crate) fn unchecked(self) -> Self {
        Self {
            identity: None,
            ..self
        }
    }

    /// The same caller for a request that changes something in Slurm: not sent while the
    /// client has had an answer of another cluster since its last confirmation.
    pub(crate) fn write(self) -> Self {
        Self {
            writes: true,
            ..self
        }
    }

    /// [`Identity::judge`] when answers are checked.
    fn judge(
        &self,
        operation: &'static str,
        served: Option<String>,
        made: Option<u32>,
    ) -> Result<(), SlurmError> {
        self.identity
            .map_or(Ok(()), |identity| identity.judge(operation, served, made))
    }

    /// Run one generated call with retries (idempotent calls only) and turn whatever came back
    /// into a checked body or the right error.
    pub(crate) async fn call<'a, T, E, F, Fut>(
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
            if self.writes
                && let Some(identity) = self.identity
            {
                identity.may_write(operation)?;
            }
            let (result, exchange) = transport::observed(self.timeout, request()).await;
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
                self.judge(
                    operation,
                    body.served_cluster(),
                    body.job_made().map(|s| s.job_id),
                )?;
                let errors = body.errors();
                // 200 with errors[] is a failure, except for slurmrestd's "No error" entries
                // (error_number 0), which go with a missing result (e.g. an unknown node).
                if errors.iter().any(|e| e.code != 0) {
                    return Err(made_or(operation, status, body.job_made(), || {
                        classify(operation, status, subject, errors)
                    }));
                }
                for warning in body.warnings() {
                    tracing::debug!(operation, warning, "slurmrestd warning");
                }
                Ok(body)
            }
            Err(ProgenitorError::ErrorResponse(value)) => {
                let status = value.status().as_u16();
                let body = value.into_inner();
                self.judge(
                    operation,
                    body.served_cluster(),
                    body.job_made().map(|s| s.job_id),
                )?;
                Err(made_or(operation, status, body.job_made(), || {
                    self.status_error(operation, subject, status, body.errors())
                }))
            }
            Err(ProgenitorError::InvalidResponsePayload(bytes, error)) => {
                log_unexpected_body(operation, exchange.status, &bytes, Some(&error));
                self.judge(operation, (self.cluster_from_bytes)(&bytes), None)?;
                match exchange.status {
                    // A submit answered 2xx whose body drifted from its type (one field of
                    // another shape) still names the job made: that job, not a search for it.
                    Some(status) if (200..300).contains(&status) => {
                        let errors = (self.errors_from_bytes)(&bytes);
                        Err(made_or(
                            operation,
                            status,
                            made_in_bytes::<T>(&bytes, &errors),
                            || decode_error(operation, self.version, &error, Some(status)),
                        ))
                    }
                    Some(status) => {
                        Err(self.undecoded_error::<T>(operation, subject, status, &bytes))
                    }
                    None => Err(decode_error(operation, self.version, &error, None)),
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
                self.judge(operation, (self.cluster_from_bytes)(&bytes), None)?;
                Err(self.undecoded_error::<T>(operation, subject, status, &bytes))
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

    /// An error answer not read as its declared type `T`: for a submit, the job it names if it
    /// names one (its errors are then no refusal); else what its entries mean.
    fn undecoded_error<T: Envelope>(
        &self,
        operation: &'static str,
        subject: Subject<'_>,
        status: u16,
        bytes: &[u8],
    ) -> SlurmError {
        let errors = (self.errors_from_bytes)(bytes);
        made_or(
            operation,
            status,
            made_in_bytes::<T>(bytes, &errors),
            || self.status_error(operation, subject, status, errors),
        )
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
                detail: format!("{} is not served ({operation}: HTTP 404)", self.version),
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
                timeout: self.timeout,
            };
        }
        // The endpoint is named once, in the error's own field (which a tenant's message
        // leaves out: `SlurmError::for_tenant`), not again in reqwest's text with the path.
        let error = error.without_url();
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

/// The job a submit's answer (`T` a submit's type) not read as its type names by its
/// `job_id`, its `errors` among the warnings: a parser's error beside it is no refusal.
pub(crate) fn made_in_bytes<T: Envelope>(bytes: &[u8], errors: &[ApiError]) -> Option<Submitted> {
    if !T::SUBMIT {
        return None;
    }
    let body = serde_json::from_slice::<SubmitFields>(bytes).ok()?;
    let Scalar::Number(job_id) = body.job_id else {
        return None;
    };
    let job_id = u32::try_from(job_id).ok().filter(|id| *id != 0)?;
    Some(Submitted {
        job_id,
        user_message: match body.job_submit_user_msg {
            Scalar::Text(told) if !told.is_empty() => Some(told),
            _ => None,
        },
        warnings: errors
            .iter()
            .filter(|e| e.code != 0)
            .map(ApiError::message)
            .collect(),
    })
}

/// The two fields [`made_in_bytes`] reads of a body that is not its type. Not a
/// `serde_json::Value`: a body of nested objects would decode into a tree of maps some hundred
/// times its bytes, past what the element budget charges; everything else is skipped unbuilt.
#[derive(Debug, Default, serde::Deserialize)]
struct SubmitFields {
    #[serde(default)]
    job_id: Scalar,
    #[serde(default)]
    job_submit_user_msg: Scalar,
}

/// A number or a text; anything else skipped without being built.
#[derive(Debug, Default, PartialEq)]
enum Scalar {
    Number(u64),
    Text(String),
    #[default]
    Other,
}

impl<'de> serde::Deserialize<'de> for Scalar {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
        struct ScalarVisitor;
        impl<'de> Visitor<'de> for ScalarVisitor {
            type Value = Scalar;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_u64<E>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar::Number(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Scalar, E> {
                Ok(u64::try_from(v).map_or(Scalar::Other, Scalar::Number))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            fn visit_unit<E>(self) -> Result<Scalar, E> {
                Ok(Scalar::Other)
            }
            fn visit_str<E>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar::Text(v.to_owned()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Scalar::Other)
            }
        }
        deserializer.deserialize_any(ScalarVisitor)
    }
}

/// An answer with errors: a submit's with the job it made ([`SlurmError::SubmitMade`]), else
/// what its errors mean (`otherwise`).
pub(crate) fn made_or(
    operation: &'static str,
    status: u16,
    made: Option<Submitted>,
    otherwise: impl FnOnce() -> SlurmError,
) -> SlurmError {
    match made {
        Some(submitted) => SlurmError::SubmitMade {
            operation,
            status,
            submitted,
        },
        None => otherwise(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn excerpts_are_bounded_and_single_line() {
        assert_eq!(excerpt(b"  short  "), "short");
        let long = "x".repeat(1000);
        assert_eq!(excerpt(long.as_bytes()).chars().count(), 257);
        assert_eq!(excerpt(b"a\nb\r\x1b[31m"), "a\\nb\\r\\u{1b}[31m");
    }
}
