//! Errors of the slurmrestd facade.
//!
//! slurmrestd's HTTP status codes do not always tell the truth (200 with `errors[]`, 200 with a
//! failed cancel inside `status[]`, 200 without `nodes` for an unknown node, 511 for a bad token):
//! the facade reads the body and turns every such response into one of these variants, so callers
//! match on meaning, not on HTTP codes.

use super::auth::AuthError;
use super::types::Submitted;
use super::version::ApiVersion;

/// Slurm's own error numbers (`slurm_errno.h`) that callers act on.
pub mod errno {
    pub const PROTOCOL_AUTHENTICATION_ERROR: i64 = 1007;
    pub const INVALID_PARTITION_NAME: i64 = 2000;
    pub const ACCESS_DENIED: i64 = 2002;
    /// `ESLURM_ACCOUNTING_POLICY`: the job violates an accounting or QoS limit; a submit limit
    /// (`MaxSubmitJobs`, per user or QoS) lifts as the user's jobs end.
    pub const ACCOUNTING_POLICY: i64 = 2050;
    pub const USER_ID_MISSING: i64 = 2010;
    pub const NODES_BUSY: i64 = 2016;
    pub const INVALID_JOB_ID: i64 = 2017;
    pub const INVALID_NODE_NAME: i64 = 2018;
    pub const ALREADY_DONE: i64 = 2021;
    pub const INVALID_NODE_STATE: i64 = 2028;
    pub const INVALID_FEATURE: i64 = 2029;
    /// Slurm 26.05's answer to e.g. RESUME on a node that is not drained (24.11 says 2028).
    pub const INVALID_NODE_STATE_TRANSITION: i64 = 2180;
    /// slurmrestd could not talk to slurmctld (`SLURMCTLD_COMMUNICATIONS_*`: connect, send,
    /// receive, shutdown, backoff). slurmrestd answers so only after its own MessageTimeout.
    pub const CONTROLLER_COMMUNICATION: std::ops::RangeInclusive<i64> = 1800..=1804;
    /// `SLURM_ERROR`, "Unspecified error": a refusal without a number of its own. From
    /// slurmctld (a site's `job_submit.lua` returning `slurm.ERROR`, which may pass: a limit,
    /// a maintenance window, a script fixed) or from slurmrestd's parser for a value of the
    /// request (24.11: "Invalid cpu_frequency", its source the value's path, `#/job/...`).
    pub const UNSPECIFIED: i64 = -1;
    /// `ESLURM_MISSING_TIME_LIMIT`: a job_submit plugin (`require_timelimit`) wants a time limit.
    pub const MISSING_TIME_LIMIT: i64 = 8000;
    /// Error numbers of a refusal: nothing was carried out. `SLURM_ERROR`, slurmctld's own
    /// (`ESLURM_*`), SPANK's, slurmdbd's and the plugins' (7xxx: accounting, federation,
    /// topology, the Lua wrapper; 8xxx: job_submit and other plugins), and slurmrestd's own
    /// before it sends anything (containers, URLs, HTTP, TLS). Any other number may be an
    /// exchange carried out with its answer lost: the communication and socket errors (1xxx,
    /// 5xxx), a system errno from a broken connection (104, 110), the authentication of
    /// slurmctld's reply (6xxx), slurmrestd's own 9xxx. Entries of slurmrestd's parser (their
    /// source a path of the request, `#/job/…`) are judged apart: alone and without a job id,
    /// nothing reached slurmctld (`SlurmError::refuses_job`); with slurmctld's entries, those
    /// decide (`deciding_code`); with a job id, the job was made (24.11 and 26.05 answer
    /// `mail_type: ["BOGUS"]` with 9207 and the job).
    pub const REFUSALS: &[std::ops::RangeInclusive<i64>] = &[
        UNSPECIFIED..=UNSPECIFIED,
        2000..=2999,
        3000..=3999,
        7000..=8999,
        10000..=13999,
    ];

    /// Submit refusals about the job itself, which the same request always gets again: an
    /// impossible size, layout, time limit, account, QoS, GRES, licence, array or burst-buffer
    /// request (`ESLURM_*`; 2045 and 2066 seen on Slurm 24.11 for an unknown account and
    /// QoS, 2018 for `required_nodes` naming a node slurmctld does not have). Not
    /// `ESLURM_ACCOUNTING_POLICY` (2050): it also means a submit limit such as `MaxSubmitJobs`,
    /// which lifts as jobs end.
    pub const JOB_REFUSED: &[i64] = &[
        2001, // DEFAULT_PARTITION_NOT_SET
        2003, // JOB_MISSING_REQUIRED_PARTITION_GROUP
        2004, // REQUESTED_NODES_NOT_IN_PARTITION
        2005, // TOO_MANY_REQUESTED_CPUS
        2006, // INVALID_NODE_COUNT
        2008, // JOB_MISSING_SIZE_SPECIFICATION
        2009, // JOB_SCRIPT_MISSING
        2012, // PATHNAME_TOO_LONG
        2014, // REQUESTED_NODE_CONFIG_UNAVAILABLE
        2015, // REQUESTED_PART_CONFIG_UNAVAILABLE
        2018, // INVALID_NODE_NAME (a node the job names that slurmctld does not have)
        2023, // BAD_DIST
        2025, // BAD_TASK_COUNT
        2044, // INVALID_TASK_MEMORY
        2045, // INVALID_ACCOUNT
        2048, // INVALID_LICENSES
        2051, // INVALID_TIME_LIMIT
        2057, // INVALID_WCKEY
        2066, // INVALID_QOS
        2072, // INVALID_GRES
        2081, // INVALID_ARRAY
        2094, // INVALID_BURST_BUFFER_REQUEST
        MISSING_TIME_LIMIT,
    ];
}

/// One entry of a response's `errors[]` (or a cancel's `status[].error`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ApiError {
    /// Slurm error number; 0 when slurmrestd gave none.
    pub code: i64,
    /// Slurm's text for the number, e.g. "Invalid partition name specified".
    pub error: String,
    /// slurmrestd's description of what failed, often more specific.
    pub description: String,
    /// The slurmrestd component that reported it.
    pub source: String,
}

impl ApiError {
    /// A one-line human message: the description when there is one, else the error text.
    pub fn message(&self) -> String {
        match (self.error.is_empty(), self.description.is_empty()) {
            (false, false) if self.error != self.description => {
                format!("{}: {}", self.error, self.description)
            }
            (_, false) => self.description.clone(),
            (false, true) => self.error.clone(),
            (true, true) => format!("Slurm error {}", self.code),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error("cannot reach slurmrestd at {endpoint}: {detail}")]
    Unreachable {
        endpoint: String,
        detail: String,
        #[source]
        source: Option<reqwest::Error>,
    },
    #[error("TLS connection to {endpoint} failed: {detail}")]
    Tls { endpoint: String, detail: String },
    #[error("slurmrestd did not answer {operation} within {timeout:?}")]
    Timeout {
        operation: &'static str,
        timeout: std::time::Duration,
    },
    #[error(
        "slurmrestd rejected the credentials (HTTP {status}){}",
        detail_suffix(detail)
    )]
    Unauthorized { status: u16, detail: String },
    #[error("cannot build credentials")]
    Credentials(#[from] AuthError),
    #[error("Slurm denied {operation}: {message}")]
    PermissionDenied {
        operation: &'static str,
        message: String,
    },
    #[error("{kind} {name} not found")]
    NotFound { kind: &'static str, name: String },
    /// slurmrestd answers, but its slurmctld does not (stopped, restarting, unreachable).
    #[error("slurmrestd cannot reach slurmctld for {operation}: {message}")]
    ControllerNotResponding {
        operation: &'static str,
        message: String,
    },
    #[error("node {node} is busy (it is running jobs)")]
    NodeBusy { node: String },
    #[error("invalid partition: {message}")]
    InvalidPartition { message: String },
    #[error("invalid feature or constraint: {message}")]
    InvalidFeature { message: String },
    #[error("node {node} is not in a state that allows this: {message}")]
    InvalidNodeState { node: String, message: String },
    #[error("job {job_id} already finished")]
    AlreadyFinished { job_id: u32 },
    #[error(
        "slurmrestd refused {operation} (HTTP {status}): {}",
        first_message(errors)
    )]
    Rejected {
        operation: &'static str,
        status: u16,
        errors: Vec<ApiError>,
    },
    /// slurmrestd answered a submit with errors and with the job it made all the same (24.11
    /// and 26.05: an unknown flag, 9207, and the `job_id`; its parser goes on without the flag).
    /// The facade's submit turns it into that job, the errors among its warnings: a refusal it
    /// is not, and a resubmit would make a second job.
    #[error(
        "slurmrestd answered {operation} (HTTP {status}) with job {} made, and errors: {}",
        submitted.job_id,
        submitted.warnings.join("; ")
    )]
    SubmitMade {
        operation: &'static str,
        status: u16,
        submitted: Submitted,
    },
    /// HTTP 304: nothing changed since the `update_time` given (the node list answers this way).
    #[error("slurmrestd reports no changes for {operation}")]
    NotModified { operation: &'static str },
    #[error(
        "unexpected HTTP {} from slurmrestd for {operation}{}",
        status_text(*status),
        detail_suffix(body)
    )]
    UnexpectedStatus {
        operation: &'static str,
        status: u16,
        /// slurmrestd's own message (an `errors[]` entry of its JSON answer), or empty. Never the
        /// raw body: that is logged at debug level only, because the endpoint may not be
        /// slurmrestd, and this error's text reaches the status and the Events of the objects.
        body: String,
    },
    /// A 3xx answer. Redirects are not followed: the request, and its token, would go to a
    /// host nobody configured.
    #[error(
        "slurmrestd's endpoint answered {operation} with a redirect (HTTP {status}) {}, which is \
         not followed: set the endpoint to the URL slurmrestd really serves",
        location_text(location)
    )]
    Redirected {
        operation: &'static str,
        status: u16,
        /// The `Location` header without its query and fragment, at most
        /// [`MAX_LOCATION_CHARS`] characters; empty when there was none.
        location: String,
    },
    /// The body went past `ClientConfig::max_response_bytes`; the rest was not read.
    #[error("slurmrestd's answer to {operation} is larger than the {limit}-byte limit")]
    ResponseTooLarge { operation: &'static str, limit: u64 },
    /// The body holds far more elements (records, list items) than any real answer of its size:
    /// decoding it would take far more memory than its bytes (`{"jobs":[{},{},…]}`). Refused
    /// before decoding; the body is not repeated.
    #[error(
        "slurmrestd's answer to {operation} holds more elements than any real answer of its \
         size ({bytes} bytes read); not decoded"
    )]
    TooManyElements { operation: &'static str, bytes: u64 },
    #[error("cannot decode slurmrestd's answer to {operation}: {detail}")]
    Decode {
        operation: &'static str,
        detail: String,
    },
    #[error("slurmrestd at {endpoint} does not serve a supported API: {detail}")]
    UnsupportedVersion { endpoint: String, detail: String },
    #[error("invalid slurmrestd endpoint {endpoint:?}: {detail}")]
    InvalidEndpoint { endpoint: String, detail: String },
    #[error("invalid CA bundle: {detail}")]
    InvalidCa { detail: String },
    #[error("invalid request: {detail}")]
    InvalidRequest { detail: String },
    /// An answer rendered for another Slurm cluster than the one the client was confirmed to
    /// reach: the endpoint now reaches another cluster's slurmrestd. Not read; the
    /// SlurmCluster's next check decides whether the connection may follow.
    #[error(
        "slurmrestd's answer to {operation} comes from Slurm cluster {served:?}, not {expected:?} \
         as confirmed: the endpoint now reaches another Slurm cluster"
    )]
    OtherCluster {
        operation: &'static str,
        expected: String,
        served: String,
    },
    /// A write not sent: an answer of another Slurm cluster than the one confirmed came since
    /// the last confirmation ([`Self::OtherCluster`]). Sent, it could act on that cluster's
    /// job or node of the same id or name. Lifts once the SlurmCluster's check has confirmed
    /// whom the endpoint reaches.
    #[error(
        "{operation} not sent: slurmrestd answered for Slurm cluster {served:?}, not {expected:?} \
         as confirmed, and nothing is changed through it until the SlurmCluster's check confirms \
         the cluster again"
    )]
    WritesHeld {
        operation: &'static str,
        expected: String,
        served: String,
    },
}

fn detail_suffix(detail: &str) -> String {
    if detail.is_empty() {
        String::new()
    } else {
        format!(": {detail}")
    }
}

/// The status with its standard reason phrase ("502 Bad Gateway"): the code's meaning, not the
/// server's words.
fn status_text(status: u16) -> String {
    match reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|code| code.canonical_reason())
    {
        Some(reason) => format!("{status} {reason}"),
        None => status.to_string(),
    }
}

fn location_text(location: &str) -> String {
    if location.is_empty() {
        "without a Location".to_owned()
    } else {
        format!("to {location:?}")
    }
}

/// The most characters of a redirect's `Location` an error repeats.
pub const MAX_LOCATION_CHARS: usize = 120;

/// `text` cut to at most `max` characters (`…` marks a cut), control characters escaped: for
/// short values from an answer that an error names (a redirect's target, a data_parser name).
pub(crate) fn shortened(text: &str, max: usize) -> String {
    let mut out = String::new();
    for (count, c) in text.chars().enumerate() {
        if count == max {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A body that did not decode, told without serde's message: serde quotes the value it choked
/// on (`invalid type: string "..."`), which is the body's content, and this error's text reaches
/// statuses and Events. The full message goes to the debug log where the body is received.
pub(crate) fn decode_error(
    operation: &'static str,
    version: ApiVersion,
    error: &serde_json::Error,
    status: Option<u16>,
) -> SlurmError {
    use serde_json::error::Category;
    let what = match error.classify() {
        Category::Io => "the body could not be read".to_owned(),
        Category::Syntax => "the body is not JSON".to_owned(),
        Category::Eof => "the body ends before its JSON does".to_owned(),
        Category::Data => format!("the JSON does not have the {version} shape"),
    };
    let status = status.map(|s| format!(", HTTP {s}")).unwrap_or_default();
    SlurmError::Decode {
        operation,
        detail: format!(
            "{what} (line {}, column {}{status})",
            error.line(),
            error.column()
        ),
    }
}

fn first_message(errors: &[ApiError]) -> String {
    match errors {
        [] => "no error details".to_owned(),
        [only] => only.message(),
        [first, rest @ ..] => format!("{} (and {} more)", first.message(), rest.len()),
    }
}

impl SlurmError {
    /// This error as a tenant reads it (a SlurmJob's Events and conditions): without where
    /// slurmrestd is or redirects to. Tenants cannot read SlurmClusters, and the address of
    /// the admin's JWT API is not theirs to learn from a failed submit. The operator's log and
    /// the SlurmCluster's status keep it.
    pub fn for_tenant(&self) -> String {
        match self {
            Self::Unreachable { detail, .. } => format!("cannot reach slurmrestd: {detail}"),
            // The detail may name the host (a certificate for another name).
            Self::Tls { .. } => "TLS connection to slurmrestd failed; the platform admin sees why \
                                 in the SlurmCluster's status"
                .to_owned(),
            Self::UnsupportedVersion { .. } | Self::InvalidEndpoint { .. } => {
                "slurmrestd's endpoint is not usable; the platform admin sees why in the \
                 SlurmCluster's status"
                    .to_owned()
            }
            // Cluster names are the platform's, as the endpoint is.
            Self::OtherCluster { .. } | Self::WritesHeld { .. } => {
                "slurmrestd's endpoint now reaches another Slurm \
                                          cluster; the platform admin sees which in the \
                                          SlurmCluster's status"
                    .to_owned()
            }
            Self::Redirected {
                operation, status, ..
            } => format!(
                "slurmrestd's endpoint answered {operation} with a redirect (HTTP {status}); \
                 the platform admin must set the SlurmCluster's endpoint"
            ),
            other => crate::error_chain::Chain(other).to_string(),
        }
    }

    /// Whether a request that failed this way may have been carried out all the same: no answer
    /// came (a timeout, a connection lost after it was made), or one that cannot be read, or an
    /// error number that is not a refusal's ([`errno::REFUSALS`]: a communication error, slurmctld
    /// may have acted and its reply been lost). Only what provably did nothing is `false`: a
    /// connection never made, a refusal (slurmctld's, a job_submit plugin's, slurmdbd's: before,
    /// those outside `ESLURM_*` sent such a SlurmJob through a wait for a listing, an accounting
    /// search and the same submit again, without end), slurmrestd refusing the request or its
    /// credentials, a configuration error. A submit answered with errors and the job it made is
    /// not an error at all (`SubmitMade`, turned into the submitted job by the facade).
    pub fn outcome_unknown(&self) -> bool {
        match self {
            Self::Unreachable { source, .. } => source.as_ref().is_none_or(|e| !e.is_connect()),
            Self::Rejected { status, errors, .. } => match self.slurm_errno() {
                // Only the parser spoke, and no job id came: nothing reached slurmctld (a
                // submit that went out would have its own entry, or the job).
                Some(_) if only_parser(errors) => false,
                Some(code) => {
                    !errno::REFUSALS.iter().any(|r| r.contains(&code))
                        && code != errno::PROTOCOL_AUTHENTICATION_ERROR
                }
                None => *status >= 500,
            },
            Self::UnexpectedStatus { status, .. } => *status >= 500,
            Self::Unauthorized { .. }
            | Self::Credentials(_)
            | Self::PermissionDenied { .. }
            | Self::NotFound { .. }
            | Self::NodeBusy { .. }
            | Self::InvalidPartition { .. }
            | Self::InvalidFeature { .. }
            | Self::InvalidNodeState { .. }
            | Self::AlreadyFinished { .. }
            | Self::NotModified { .. }
            | Self::Redirected { .. }
            | Self::UnsupportedVersion { .. }
            | Self::InvalidEndpoint { .. }
            | Self::InvalidCa { .. }
            | Self::InvalidRequest { .. }
            | Self::WritesHeld { .. } => false,
            // Timeouts, slurmctld not answering slurmrestd, answers that cannot be read, a TLS
            // failure, and whatever is added later: not known.
            _ => true,
        }
    }

    /// Whether trying again later can succeed without anyone changing anything: network trouble,
    /// timeouts, a server error without a Slurm error number.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Unreachable { .. }
            | Self::Timeout { .. }
            | Self::ControllerNotResponding { .. } => true,
            Self::UnexpectedStatus { status, .. } => *status >= 500 || *status == 429,
            Self::NodeBusy { .. } => true,
            // Lifts by itself once the SlurmCluster's check has confirmed the cluster.
            Self::WritesHeld { .. } => true,
            _ => false,
        }
    }

    /// Whether Slurm refused a job for a reason that will not change by itself: a partition,
    /// feature, account, QoS, size or limit the cluster does not have or does not allow this
    /// user, or a request the facade would not send. The same request gets the same answer, so
    /// only a different one (a spec change) can succeed: also a value of the request that
    /// slurmrestd's parser refuses without a number of its own (-1, its source the value's
    /// path), not slurmctld's -1 (a job_submit.lua may refuse for a while). False for every
    /// error that leaves a submit's outcome unknown (network, timeouts, undecodable answers)
    /// and for refusals that lift on their own (submit limits, a silent slurmctld).
    pub fn refuses_job(&self) -> bool {
        match self {
            Self::InvalidPartition { .. }
            | Self::InvalidFeature { .. }
            | Self::PermissionDenied { .. }
            | Self::InvalidRequest { .. } => true,
            Self::Rejected { errors, .. } => {
                self.slurm_errno()
                    .is_some_and(|code| errno::JOB_REFUSED.contains(&code))
                    // slurmrestd's parser refusing values of the request, and nothing else
                    // (slurmctld's -1, `slurm_submit_batch_job()`, may pass).
                    || only_parser(errors)
            }
            _ => false,
        }
    }

    /// A stable, low-cardinality name for metrics labels and condition/Event reasons.
    pub fn category(&self) -> &'static str {
        match self {
            Self::Unreachable { .. } => "Unreachable",
            Self::Tls { .. } => "TLSError",
            Self::Timeout { .. } => "Timeout",
            Self::Unauthorized { .. } => "Unauthorized",
            Self::Credentials(_) => "InvalidCredentials",
            Self::PermissionDenied { .. } => "PermissionDenied",
            Self::NotFound { .. } => "NotFound",
            Self::ControllerNotResponding { .. } => "ControllerNotResponding",
            Self::NodeBusy { .. } => "NodeBusy",
            Self::InvalidPartition { .. } => "InvalidPartition",
            Self::InvalidFeature { .. } => "InvalidFeature",
            Self::InvalidNodeState { .. } => "InvalidNodeState",
            Self::AlreadyFinished { .. } => "AlreadyFinished",
            Self::Rejected { .. } => "Rejected",
            Self::SubmitMade { .. } => "SubmitMade",
            Self::NotModified { .. } => "NotModified",
            Self::UnexpectedStatus { .. } => "UnexpectedStatus",
            Self::Redirected { .. } => "Redirected",
            Self::ResponseTooLarge { .. } => "ResponseTooLarge",
            Self::TooManyElements { .. } => "TooManyElements",
            Self::Decode { .. } => "DecodeError",
            Self::UnsupportedVersion { .. } => "UnsupportedVersion",
            Self::InvalidEndpoint { .. } => "InvalidEndpoint",
            Self::InvalidCa { .. } => "InvalidCA",
            Self::InvalidRequest { .. } => "InvalidRequest",
            Self::OtherCluster { .. } | Self::WritesHeld { .. } => "SlurmClusterChanged",
        }
    }

    /// Whether slurmrestd answered and the answer itself cannot be read (larger than the
    /// limit, far more elements than its size, not decodable): a property of what was asked
    /// for, where the connection and the server are fine. The poller keeps such a job's
    /// failure to that job.
    pub fn is_unreadable_answer(&self) -> bool {
        matches!(
            self,
            Self::ResponseTooLarge { .. } | Self::TooManyElements { .. } | Self::Decode { .. }
        )
    }

    /// Whether the facade itself should retry an idempotent call at once. Not for a busy node
    /// (the reconcile loop waits for it) nor for a silent slurmctld: slurmrestd already waited its
    /// MessageTimeout (~10 s) before answering, and the poller's own backoff spaces further tries.
    /// Nor after a timeout: slurmrestd cannot tell that the client left, and goes on building the
    /// abandoned answer; asking again at once doubles the work of a server already too slow.
    /// A proxy's 504 (Gateway Timeout) is that same timeout, its own instead of ours.
    pub(crate) fn worth_retrying_now(&self) -> bool {
        self.is_transient()
            && !matches!(
                self,
                Self::NodeBusy { .. }
                    | Self::WritesHeld { .. }
                    | Self::ControllerNotResponding { .. }
                    | Self::Timeout { .. }
                    | Self::UnexpectedStatus { status: 504, .. }
            )
    }

    /// The Slurm error number behind this error, when Slurm gave one.
    pub fn slurm_errno(&self) -> Option<i64> {
        match self {
            Self::Rejected { errors, .. } => deciding_code(errors),
            Self::NodeBusy { .. } => Some(errno::NODES_BUSY),
            Self::InvalidPartition { .. } => Some(errno::INVALID_PARTITION_NAME),
            Self::InvalidFeature { .. } => Some(errno::INVALID_FEATURE),
            Self::InvalidNodeState { .. } => Some(errno::INVALID_NODE_STATE),
            Self::AlreadyFinished { .. } => Some(errno::ALREADY_DONE),
            _ => None,
        }
    }
}

/// What a failed call was about, so an error number can name the right thing.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Subject<'a> {
    None,
    Job(u32),
    Node(&'a str),
}

/// Whether `error` is slurmrestd's parser speaking of a value of the request: its source is
/// the value's path (`#/job/cpu_frequency/`). slurmctld's entries name a function
/// (`slurm_submit_batch_job()`); a body not slurmrestd's keeps no source at all.
fn from_parser(error: &ApiError) -> bool {
    error.source.starts_with("#/")
}

/// Whether the parser's entries are an answer's only errors (its entries numbered 0 aside).
fn only_parser(errors: &[ApiError]) -> bool {
    let mut numbered = errors.iter().filter(|e| e.code != 0).peekable();
    numbered.peek().is_some() && numbered.all(from_parser)
}

/// The error number an answer is about: the first of an entry not the parser's, else the
/// parser's first. slurmrestd's parser goes on after some errors (an unknown flag, 9207) and
/// the submit with it: slurmctld's refusal that follows says what happened.
fn deciding_code(errors: &[ApiError]) -> Option<i64> {
    deciding(errors)
        .and_then(|at| errors.get(at))
        .map(|e| e.code)
}

/// Where in `errors` the entry [`deciding_code`] takes is.
fn deciding(errors: &[ApiError]) -> Option<usize> {
    let at = |parser: bool| {
        errors
            .iter()
            .position(|e| e.code != 0 && (parser || !from_parser(e)))
    };
    at(false).or_else(|| at(true))
}

/// Turn a response's error entries into the most specific error. `status` is the HTTP status.
pub(crate) fn classify(
    operation: &'static str,
    status: u16,
    subject: Subject<'_>,
    errors: Vec<ApiError>,
) -> SlurmError {
    let code = deciding_code(&errors).unwrap_or(0);
    // The deciding entry first: what a message shows first is what the answer is about.
    let mut errors = errors;
    if let Some(at) = deciding(&errors) {
        errors[..=at].rotate_right(1);
    }
    let message = match errors.split_first() {
        None => String::new(),
        Some((first, rest)) => {
            let others: Vec<String> = rest
                .iter()
                .filter(|e| e.code != 0)
                .map(ApiError::message)
                .collect();
            if others.is_empty() {
                first.message()
            } else {
                format!("{} (also: {})", first.message(), others.join("; "))
            }
        }
    };
    let node = |default: &str| match subject {
        Subject::Node(name) => name.to_owned(),
        _ => default.to_owned(),
    };
    match code {
        errno::PROTOCOL_AUTHENTICATION_ERROR => SlurmError::Unauthorized {
            status,
            detail: message,
        },
        code if errno::CONTROLLER_COMMUNICATION.contains(&code) => {
            SlurmError::ControllerNotResponding { operation, message }
        }
        errno::INVALID_PARTITION_NAME => SlurmError::InvalidPartition { message },
        errno::INVALID_FEATURE => SlurmError::InvalidFeature { message },
        errno::NODES_BUSY => SlurmError::NodeBusy {
            node: node("(unknown)"),
        },
        errno::INVALID_NODE_STATE | errno::INVALID_NODE_STATE_TRANSITION => {
            SlurmError::InvalidNodeState {
                node: node("(unknown)"),
                message,
            }
        }
        // A node's own request: that node is gone. Any other (a submit's `required_nodes` or
        // `excluded_nodes`): Slurm's refusal of the request, its message kept.
        errno::INVALID_NODE_NAME => match subject {
            Subject::Node(name) => SlurmError::NotFound {
                kind: "node",
                name: name.to_owned(),
            },
            _ => SlurmError::Rejected {
                operation,
                status,
                errors,
            },
        },
        errno::INVALID_JOB_ID => match subject {
            Subject::Job(id) => SlurmError::NotFound {
                kind: "job",
                name: id.to_string(),
            },
            _ => SlurmError::Rejected {
                operation,
                status,
                errors,
            },
        },
        errno::ALREADY_DONE => match subject {
            Subject::Job(job_id) => SlurmError::AlreadyFinished { job_id },
            _ => SlurmError::Rejected {
                operation,
                status,
                errors,
            },
        },
        errno::ACCESS_DENIED | errno::USER_ID_MISSING => {
            SlurmError::PermissionDenied { operation, message }
        }
        _ => SlurmError::Rejected {
            operation,
            status,
            errors,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(code: i64, text: &str) -> ApiError {
        ApiError {
            code,
            error: text.into(),
            description: String::new(),
            source: String::new(),
        }
    }

    #[test]
    fn error_numbers_map_to_typed_variants() {
        let cases: Vec<(i64, Subject<'_>, &str)> = vec![
            (1007, Subject::None, "Unauthorized"),
            (2000, Subject::None, "InvalidPartition"),
            (2029, Subject::None, "InvalidFeature"),
            (2016, Subject::Node("dyn1"), "NodeBusy"),
            (2028, Subject::Node("n1"), "InvalidNodeState"),
            (2180, Subject::Node("n1"), "InvalidNodeState"),
            (2018, Subject::Node("nosuch"), "NotFound"),
            (2018, Subject::None, "Rejected"),
            (2017, Subject::Job(7), "NotFound"),
            (2017, Subject::None, "Rejected"),
            (2021, Subject::Job(5), "AlreadyFinished"),
            (2010, Subject::Node("n1"), "PermissionDenied"),
            (2019, Subject::None, "Rejected"),
            (1800, Subject::None, "ControllerNotResponding"),
            (1804, Subject::Job(3), "ControllerNotResponding"),
            (1805, Subject::None, "Rejected"),
        ];
        for (code, subject, want) in cases {
            let got = classify("op", 500, subject, vec![err(code, "x")]);
            assert_eq!(got.category(), want, "errno {code} with {subject:?}: {got}");
        }
    }

    /// What only a different job can fix, as slurmctld answered `POST /job/submit` (24.11: 2000
    /// unknown partition, 2029 unknown feature, 2045 unknown account, 2066 unknown QoS), against
    /// what may pass later or whose outcome is unknown.
    #[test]
    fn submit_refusals_that_only_a_spec_change_fixes() {
        let submit =
            |code: i64| classify("post_job_submit", 500, Subject::None, vec![err(code, "x")]);
        for code in [2000, 2029, 2045, 2066, 2051, 2006, 2072, 2002, 2010, 2018] {
            let e = submit(code);
            assert!(e.refuses_job(), "errno {code}: {e}");
            assert!(!e.is_transient(), "errno {code}");
        }
        // A submit limit (MaxSubmitJobs) lifts as jobs end; slurmctld may come back; an errno
        // this list does not name is not guessed at.
        for code in [2050, 1800, 1007, 2105, 0, 9999] {
            assert!(!submit(code).refuses_job(), "errno {code}");
        }
        let unknown_outcome = [
            SlurmError::Timeout {
                operation: "post_job_submit",
                timeout: std::time::Duration::from_secs(1),
            },
            SlurmError::Decode {
                operation: "post_job_submit",
                detail: "x".into(),
            },
            SlurmError::UnexpectedStatus {
                operation: "post_job_submit",
                status: 502,
                body: String::new(),
            },
        ];
        for e in unknown_outcome {
            assert!(!e.refuses_job(), "{e}");
        }
        assert!(SlurmError::InvalidRequest { detail: "x".into() }.refuses_job());
    }

    #[test]
    fn busy_node_error_names_the_node_and_is_transient() {
        let e = classify(
            "delete_node",
            500,
            Subject::Node("dyn1"),
            vec![err(2016, "Requested nodes are busy")],
        );
        assert!(matches!(&e, SlurmError::NodeBusy { node } if node == "dyn1"));
        assert!(e.is_transient());
        assert_eq!(e.slurm_errno(), Some(2016));
    }

    #[test]
    fn first_nonzero_code_wins_over_no_error_entries() {
        let e = classify(
            "op",
            500,
            Subject::None,
            vec![
                err(0, "No error"),
                err(2000, "Invalid partition name specified"),
            ],
        );
        assert!(
            matches!(e, SlurmError::InvalidPartition { ref message } if message.contains("Invalid partition"))
        );
    }

    #[test]
    fn messages_are_readable() {
        let e = ApiError {
            code: 2000,
            error: "Invalid partition name specified".into(),
            description: "Batch job submission failed".into(),
            source: "slurm_submit_batch_job()".into(),
        };
        assert_eq!(
            e.message(),
            "Invalid partition name specified: Batch job submission failed"
        );
        let rejected = SlurmError::Rejected {
            operation: "submit_job",
            status: 500,
            errors: vec![e.clone(), e],
        };
        assert!(rejected.to_string().contains("(and 1 more)"), "{rejected}");
        assert_eq!(
            ApiError {
                code: 9,
                ..Default::default()
            }
            .message(),
            "Slurm error 9"
        );
    }

    #[test]
    fn a_redirect_is_its_own_final_error_and_names_its_target() {
        let redirected = SlurmError::Redirected {
            operation: "diag",
            status: 302,
            location: "http://elsewhere.example/x".into(),
        };
        assert_eq!(redirected.category(), "Redirected");
        assert!(!redirected.is_transient() && !redirected.worth_retrying_now());
        let text = redirected.to_string();
        assert!(
            text.contains("302") && text.contains("elsewhere.example") && text.contains("diag"),
            "{text}"
        );
        let without = SlurmError::Redirected {
            operation: "diag",
            status: 307,
            location: String::new(),
        };
        assert!(
            without.to_string().contains("without a Location"),
            "{without}"
        );
    }

    #[test]
    fn decode_errors_do_not_repeat_the_body() {
        let cases: [&[u8]; 5] = [
            br#"{"jobs": "MARKER"}"#,
            br#"{"jobs": [{"job_id": "MARKER"}]}"#,
            b"MARKER",
            br#"{"jobs": ["MARKER"#,
            b"",
        ];
        for body in cases {
            #[derive(Debug, serde::Deserialize)]
            #[allow(dead_code)]
            struct Shape {
                jobs: Vec<Inner>,
            }
            #[derive(Debug, serde::Deserialize)]
            #[allow(dead_code)]
            struct Inner {
                job_id: u32,
            }
            let serde_error = serde_json::from_slice::<Shape>(body).unwrap_err();
            let error = decode_error("jobs", ApiVersion::V0_0_41, &serde_error, Some(200));
            let text = error.to_string();
            assert_eq!(error.category(), "DecodeError");
            assert!(!text.contains("MARKER"), "{text}");
            assert!(text.contains("jobs") && text.contains("HTTP 200"), "{text}");
        }
    }

    #[test]
    fn shortened_bounds_and_escapes() {
        assert_eq!(shortened("abc", 3), "abc");
        assert_eq!(shortened("abcd", 3), "abc…");
        assert_eq!(shortened("a\r\nb", 10), "a\\r\\nb");
    }

    #[test]
    fn unexpected_statuses_name_the_reason_phrase_not_the_body() {
        let error = SlurmError::UnexpectedStatus {
            operation: "diag",
            status: 502,
            body: String::new(),
        };
        assert_eq!(
            error.to_string(),
            "unexpected HTTP 502 Bad Gateway from slurmrestd for diag"
        );
    }

    #[test]
    fn transient_classification() {
        let unexpected = |status| SlurmError::UnexpectedStatus {
            operation: "op",
            status,
            body: String::new(),
        };
        assert!(unexpected(502).is_transient());
        assert!(unexpected(502).worth_retrying_now());
        // A proxy in front of slurmrestd gave up on a slow answer: slurmrestd still builds it.
        assert!(unexpected(504).is_transient());
        assert!(!unexpected(504).worth_retrying_now());
        let ctld = classify(
            "nodes",
            502,
            Subject::None,
            vec![err(
                1800,
                "Unable to contact slurm controller (connect failure)",
            )],
        );
        assert!(ctld.is_transient(), "{ctld}");
        assert!(!ctld.worth_retrying_now(), "slurmrestd already waited");
        let timeout = SlurmError::Timeout {
            operation: "jobs_state",
            timeout: std::time::Duration::from_secs(30),
        };
        assert!(timeout.is_transient(), "{timeout}");
        assert!(
            !timeout.worth_retrying_now(),
            "slurmrestd still builds the answer"
        );
        assert!(unexpected(429).is_transient());
        assert!(!unexpected(400).is_transient());
        assert!(
            !SlurmError::Unauthorized {
                status: 511,
                detail: String::new()
            }
            .is_transient()
        );
        assert!(
            !SlurmError::InvalidPartition {
                message: String::new()
            }
            .is_transient()
        );
    }

    /// A connection refused never carried a request: nothing was done.
    #[tokio::test]
    async fn a_connection_never_made_did_nothing() {
        // Not left to whichever test happens to build a client of ours first.
        crate::tls::install_crypto_provider();
        let refused = reqwest::Client::new()
            .get("http://127.0.0.1:1/")
            .send()
            .await
            .unwrap_err();
        assert!(refused.is_connect(), "{refused}");
        let error = SlurmError::Unreachable {
            endpoint: "http://127.0.0.1:1/".into(),
            detail: refused.to_string(),
            source: Some(refused),
        };
        assert!(!error.outcome_unknown(), "{error}");
    }

    /// What a tenant reads of an error never says where slurmrestd is, or whom the cluster's
    /// token is for; the admin's text (`Display`) does.
    #[test]
    fn a_tenant_is_not_told_where_slurmrestd_is() {
        let endpoint = "https://slurmrestd.hpc.internal:6820/";
        let errors = [
            SlurmError::Unreachable {
                endpoint: endpoint.into(),
                detail: "connection refused".into(),
                source: None,
            },
            SlurmError::Tls {
                endpoint: endpoint.into(),
                detail: "certificate not valid for name \"slurmrestd.hpc.internal\"".into(),
            },
            SlurmError::UnsupportedVersion {
                endpoint: endpoint.into(),
                detail: "v0.0.42 is not served".into(),
            },
            SlurmError::InvalidEndpoint {
                endpoint: endpoint.into(),
                detail: "no host".into(),
            },
            SlurmError::Redirected {
                operation: "post_job_submit",
                status: 302,
                location: "https://login.hpc.internal/".into(),
            },
            SlurmError::Credentials(AuthError::CannotActAs {
                user: "alice".into(),
                token_user: "hpc-admin".into(),
            }),
        ];
        for error in errors {
            let told = error.for_tenant();
            assert!(!told.contains("hpc.internal"), "{told}");
            assert!(!told.contains("hpc-admin"), "{told}");
            assert!(!told.is_empty());
        }
        let admin = SlurmError::Unreachable {
            endpoint: endpoint.into(),
            detail: "connection refused".into(),
            source: None,
        };
        assert!(admin.to_string().contains(endpoint), "{admin}");
    }

    /// What may have been carried out although it failed: no answer, or none that can be read,
    /// or slurmctld's own answer lost; never a refusal, a limit or a request not sent.
    #[test]
    fn outcome_unknown_classification() {
        let unexpected = |status| SlurmError::UnexpectedStatus {
            operation: "op",
            status,
            body: String::new(),
        };
        let unknown = [
            SlurmError::Timeout {
                operation: "post_job_submit",
                timeout: std::time::Duration::from_secs(30),
            },
            SlurmError::Unreachable {
                endpoint: "http://x".into(),
                detail: "connection reset".into(),
                source: None,
            },
            SlurmError::Decode {
                operation: "post_job_submit",
                detail: "EOF".into(),
            },
            classify(
                "post_job_submit",
                500,
                Subject::None,
                vec![err(1800, "Unable to contact slurm controller")],
            ),
            unexpected(502),
        ];
        for error in unknown {
            assert!(error.outcome_unknown(), "{error}");
        }
        // slurmctld made the job, and its reply missed slurmrestd's MessageTimeout (slurmrestd
        // answers 504 for SLURM_PROTOCOL_SOCKET_IMPL_TIMEOUT).
        let lost_reply = classify(
            "post_job_submit",
            504,
            Subject::None,
            vec![err(5004, "Socket timed out on send/recv operation")],
        );
        assert!(lost_reply.outcome_unknown(), "{lost_reply}");
        let known = [
            classify(
                "post_job_submit",
                500,
                Subject::None,
                vec![err(
                    2050,
                    "Job violates accounting/QOS policy (MaxSubmitJobs)",
                )],
            ),
            SlurmError::Unauthorized {
                status: 401,
                detail: String::new(),
            },
            unexpected(400),
            SlurmError::InvalidPartition {
                message: String::new(),
            },
        ];
        for error in known {
            assert!(!error.outcome_unknown(), "{error}");
        }
        // By Slurm's number and source: (code, source, whether a job may have been made,
        // whether the same submit is always refused).
        let ctld = "slurm_submit_batch_job()";
        let table = [
            (-1, ctld, false, false), // job_submit.lua's slurm.ERROR: may pass, retried
            (-1, "#/job/cpu_frequency/", false, true), // slurmrestd refusing a value
            (104, ctld, true, false), // ECONNRESET: the reply lost on the way
            (110, ctld, true, false), // ETIMEDOUT
            (1001, ctld, true, false), // SLURM_COMMUNICATIONS_CONNECTION_ERROR
            (1017, ctld, true, false), // SLURM_COMMUNICATIONS_READ_TIMEOUT
            (1007, ctld, false, false), // PROTOCOL_AUTHENTICATION_ERROR
            (1804, ctld, true, false), // SLURMCTLD_COMMUNICATIONS_BACKOFF
            (2045, ctld, false, true), // INVALID_ACCOUNT
            (2050, ctld, false, false), // ACCOUNTING_POLICY: a submit limit lifts
            (3000, ctld, false, false), // ESPANK_ERROR
            (5004, ctld, true, false), // SLURM_PROTOCOL_SOCKET_IMPL_TIMEOUT
            (6000, ctld, true, false), // ESLURM_AUTH_CRED_INVALID: of the reply, maybe
            (7000, ctld, false, false), // ESLURM_DB_CONNECTION
            (7404, ctld, false, false), // ESLURM_LUA_FUNC_FAILED: the site's script failed
            (8000, ctld, false, true), // MISSING_TIME_LIMIT (job_submit/require_timelimit)
            (8004, ctld, false, false), // ESLURM_PLUGIN_NOT_LOADED
            (9001, ctld, true, false), // ESLURM_REST_FAIL_PARSING, not of a value
            // The parser alone, and no job id: nothing reached slurmctld (with the job made,
            // the answer has its id: `SubmitMade`).
            (9207, "#/job/mail_type[0]/", false, true),
            (10000, ctld, false, false), // ESLURM_CONTAINER_NOT_CONFIGURED
            (13000, ctld, false, false), // ESLURM_TLS_REQUIRED
        ];
        for (code, source, unknown, refused) in table {
            let entry = ApiError {
                source: source.into(),
                ..err(code, "x")
            };
            let error = classify("post_job_submit", 500, Subject::None, vec![entry]);
            assert_eq!(error.outcome_unknown(), unknown, "{code} {source}: {error}");
            assert_eq!(error.refuses_job(), refused, "{code} {source}: {error}");
        }
        // The parser's error, then slurmctld's: slurmctld's words decide.
        let parser = ApiError {
            source: "#/job/mail_type[0]/".into(),
            ..err(9207, "Unknown flag")
        };
        let then = |code: i64| {
            let ctld = ApiError {
                source: ctld.into(),
                ..err(code, "x")
            };
            classify(
                "post_job_submit",
                500,
                Subject::None,
                vec![parser.clone(), ctld],
            )
        };
        let refused = then(2000);
        assert!(
            matches!(refused, SlurmError::InvalidPartition { .. }),
            "{refused}"
        );
        // slurmctld's words first, the parser's kept after them.
        assert!(
            refused
                .to_string()
                .starts_with("invalid partition: x (also: Unknown flag"),
            "{refused}"
        );
        let limited = then(errno::ACCOUNTING_POLICY);
        assert_eq!(limited.slurm_errno(), Some(errno::ACCOUNTING_POLICY));
        assert!(
            limited.to_string().contains("): x (and 1 more)"),
            "{limited}"
        );
        assert!(
            !limited.outcome_unknown() && !limited.refuses_job(),
            "{limited}"
        );
        let lost = then(104);
        assert!(lost.outcome_unknown() && !lost.refuses_job(), "{lost}");
        // Should one escape the facade's submit, a job made is not a refusal, nor known unmade.
        let made = SlurmError::SubmitMade {
            operation: "submit_job",
            status: 500,
            submitted: Submitted {
                job_id: 7,
                user_message: None,
                warnings: vec!["Unknown flag".into()],
            },
        };
        assert!(made.outcome_unknown() && !made.refuses_job(), "{made}");
    }
}
