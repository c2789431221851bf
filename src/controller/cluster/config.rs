//! From a SlurmCluster spec (and the Secrets/ConfigMaps it references) to a validated connection:
//! pure functions, no I/O.
//!
//! Two steps, because the referenced objects are read in between: [`plan`] checks the spec alone
//! and says which objects it needs; [`ConfigPlan::build`] checks what was read and produces the client
//! configuration, the connection settings the registry compares, and the credentials. Every bad
//! input has its own [`ConfigError`] variant and its own condition reason, so a user reading
//! `kubectl describe` knows exactly what to fix.
//!
//! The API server already enforces most of the spec rules (CEL in the CRD); they are checked again
//! here because the operator relies on them and objects can predate a rule.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::crd::{
    ApiVersion, AuthMethod, CREDENTIALS_LABEL, SlurmClusterSpec, is_object_name, quantity,
};
use crate::slurm::auth::{AuthError, MAX_TOKEN_LIFETIME, MIN_TOKEN_LIFETIME};
use crate::slurm::{ClientConfig, Credentials, DEFAULT_MAX_RESPONSE_BYTES, SlurmError, TlsOptions};
use crate::state::poller::PollerConfig;
use crate::state::registry::ConnectionSettings;

/// Shortest poll interval (the CRD's rule says the same).
pub const MIN_POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Longest poll interval (the CRD's rule says the same).
pub const MAX_POLL_INTERVAL: Duration = Duration::from_secs(300);
/// Smallest `spec.maxResponseSize` (the CRD's rule says the same): the smallest real answers,
/// a node or a job with its steps, are kilobytes.
pub const MIN_RESPONSE_BYTES: u64 = 1 << 20;
/// Largest `spec.maxResponseSize` (the CRD's rule says the same): the states of some 13 million
/// jobs, or ~450 000 nodes.
pub const MAX_RESPONSE_BYTES: u64 = 1 << 30;
/// Shortest `spec.listingTimeout` (the CRD's rule says the same): a request's own timeout.
pub const MIN_LISTING_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest `spec.listingTimeout` (the CRD's rule says the same): a full listing is asked about
/// every minute; one that takes longer holds slurmrestd more than it frees.
pub const MAX_LISTING_TIMEOUT: Duration = Duration::from_secs(3_600);

/// A spec or a referenced object the operator cannot use. Each variant has its own
/// [`reason`](Self::reason), used as the condition reason, the Event reason and a metric label.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("spec.endpoint {endpoint:?} is not a usable slurmrestd URL: {detail}")]
    InvalidEndpoint { endpoint: String, detail: String },
    #[error("spec.tls is set but spec.endpoint {endpoint:?} is not an https:// URL")]
    TlsWithoutHttps { endpoint: String },
    #[error(
        "spec.endpoint {endpoint:?} is plain http: tokens would cross the network readable by \
         anyone on the path; use https://, or set spec.allowInsecureHttp: true to accept that"
    )]
    InsecureHttp { endpoint: String },
    #[error("spec.tls sets both caSecretRef and caConfigMapRef; set at most one")]
    CaSourceAmbiguous,
    #[error(
        "spec.tls.insecureSkipVerify cannot be combined with a CA bundle: either verify with the CA or not at all"
    )]
    InsecureWithCa,
    #[error("{field} is empty: name the {kind} holding the CA bundle")]
    CaNameMissing {
        field: &'static str,
        kind: &'static str,
    },
    #[error("spec.auth sets neither jwt nor tokenSecretRef; set exactly one")]
    AuthMethodMissing,
    #[error("spec.auth sets both jwt and tokenSecretRef; set exactly one")]
    AuthMethodAmbiguous,
    #[error("{field} is empty: name a Secret in the operator's credentials namespace")]
    SecretNameMissing { field: &'static str },
    #[error(
        "{field} {name:?} is not an object name (lowercase letters, digits, '-' and '.'): name an object in the operator's credentials namespace"
    )]
    InvalidObjectName { field: &'static str, name: String },
    #[error("{field} is empty: name the key in the Secret or ConfigMap")]
    KeyNameMissing { field: &'static str },
    #[error("spec.auth.jwt.user is empty: name the Slurm user the tokens are for")]
    JwtUserMissing,
    #[error("spec.auth.jwt.user {user:?} contains characters not allowed in an HTTP header")]
    InvalidJwtUser { user: String },
    #[error(
        "spec.auth.jwt.lifetime {lifetime:?} is outside {MIN_TOKEN_LIFETIME:?}..={MAX_TOKEN_LIFETIME:?}"
    )]
    TokenLifetimeOutOfRange { lifetime: Duration },
    #[error(
        "spec.pollInterval {interval:?} is outside {MIN_POLL_INTERVAL:?}..={MAX_POLL_INTERVAL:?}"
    )]
    PollIntervalOutOfRange { interval: Duration },
    #[error("spec.maxResponseSize {size:?} is not a quantity between 1Mi and 1Gi, such as 64Mi")]
    MaxResponseSizeOutOfRange { size: String },
    #[error("spec.listingTimeout {timeout:?} is not between 30s and 1h, such as 10m")]
    ListingTimeoutOutOfRange { timeout: Duration },
    #[error(
        "Secret {name:?} ({what}) not found in the operator's credentials namespace; create it \
         with the label {CREDENTIALS_LABEL}=true (the operator sees no other Secret: one created \
         without it is found only once labelled)"
    )]
    SecretNotFound { name: String, what: &'static str },
    #[error(
        "ConfigMap {name:?} (CA bundle) not found in the operator's credentials namespace; \
         create it with the label {CREDENTIALS_LABEL}=true (the operator sees no other \
         ConfigMap: one created without it is found only once labelled)"
    )]
    ConfigMapNotFound { name: String },
    #[error(
        "ConfigMap {name:?} (CA bundle) is not marked as SlurmCluster credentials: label it \
         {CREDENTIALS_LABEL}=true (the operator trusts no other CA bundle: who may write \
         ConfigMaps there may not be who may choose whom the operator sends its tokens to)"
    )]
    ConfigMapNotMarked { name: String },
    #[error(
        "spec.endpoint {endpoint:?} is not one of the slurmrestd endpoints this operator may \
         reach ({allowed}): ask the operator's admin to add it to --allowed-endpoint"
    )]
    EndpointNotAllowed { endpoint: String, allowed: String },
    #[error(
        "Secret {name:?} ({what}) is not marked as SlurmCluster credentials: label it \
         {CREDENTIALS_LABEL}=true (the operator reads no other Secret)"
    )]
    SecretNotMarked { name: String, what: &'static str },
    #[error("Secret {name:?} ({what}) has no key {key:?}")]
    SecretKeyMissing {
        name: String,
        key: String,
        what: &'static str,
    },
    #[error("ConfigMap {name:?} has no key {key:?}")]
    ConfigMapKeyMissing { name: String, key: String },
    #[error("key {key:?} of Secret {name:?} ({what}) is empty")]
    SecretKeyEmpty {
        name: String,
        key: String,
        what: &'static str,
    },
    #[error("key {key:?} of ConfigMap {name:?} is empty")]
    ConfigMapKeyEmpty { name: String, key: String },
    #[error("the token in key {key:?} of Secret {name:?} is not UTF-8 text")]
    TokenNotUtf8 { name: String, key: String },
    #[error(
        "the token in key {key:?} of Secret {name:?} contains characters not allowed in an HTTP header"
    )]
    InvalidToken { name: String, key: String },
    #[error("the CA bundle in {kind} {name:?} (key {key:?}) is unusable: {detail}")]
    InvalidCa {
        kind: &'static str,
        name: String,
        key: String,
        detail: String,
    },
    #[error("cannot use the credentials: {detail}")]
    InvalidCredentials { detail: String },
}

impl ConfigError {
    /// Stable PascalCase reason: condition reason, Event reason and metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::InvalidEndpoint { .. } => "InvalidEndpoint",
            Self::TlsWithoutHttps { .. } => "TLSRequiresHTTPS",
            Self::InsecureHttp { .. } => "InsecureEndpoint",
            Self::EndpointNotAllowed { .. } => "EndpointNotAllowed",
            Self::SecretNotMarked { .. } => "SecretNotMarked",
            Self::CaSourceAmbiguous => "CASourceAmbiguous",
            Self::InsecureWithCa => "InsecureWithCA",
            Self::CaNameMissing { .. } => "CANameMissing",
            Self::AuthMethodMissing => "AuthMethodMissing",
            Self::AuthMethodAmbiguous => "AuthMethodAmbiguous",
            Self::SecretNameMissing { .. } => "SecretNameMissing",
            Self::InvalidObjectName { .. } => "InvalidObjectName",
            Self::KeyNameMissing { .. } => "KeyNameMissing",
            Self::JwtUserMissing => "JWTUserMissing",
            Self::InvalidJwtUser { .. } => "InvalidJWTUser",
            Self::TokenLifetimeOutOfRange { .. } => "TokenLifetimeOutOfRange",
            Self::PollIntervalOutOfRange { .. } => "PollIntervalOutOfRange",
            Self::MaxResponseSizeOutOfRange { .. } => "MaxResponseSizeOutOfRange",
            Self::ListingTimeoutOutOfRange { .. } => "ListingTimeoutOutOfRange",
            Self::SecretNotFound { .. } => "SecretNotFound",
            Self::ConfigMapNotFound { .. } => "ConfigMapNotFound",
            Self::ConfigMapNotMarked { .. } => "ConfigMapNotMarked",
            Self::SecretKeyMissing { .. } => "SecretKeyMissing",
            Self::ConfigMapKeyMissing { .. } => "ConfigMapKeyMissing",
            Self::SecretKeyEmpty { .. } => "SecretKeyEmpty",
            Self::ConfigMapKeyEmpty { .. } => "ConfigMapKeyEmpty",
            Self::TokenNotUtf8 { .. } => "TokenNotUTF8",
            Self::InvalidToken { .. } => "InvalidToken",
            Self::InvalidCa { .. } => "InvalidCA",
            Self::InvalidCredentials { .. } => "InvalidCredentials",
        }
    }

    /// Whether the error is about the credentials (so `Authenticated` is False), rather than
    /// about reaching slurmrestd (so whether the credentials work is unknown).
    pub fn concerns_credentials(&self) -> bool {
        match self {
            Self::AuthMethodMissing
            | Self::AuthMethodAmbiguous
            | Self::SecretNameMissing { .. }
            | Self::JwtUserMissing
            | Self::InvalidJwtUser { .. }
            | Self::TokenLifetimeOutOfRange { .. }
            | Self::TokenNotUtf8 { .. }
            | Self::InvalidToken { .. }
            | Self::InvalidCredentials { .. } => true,
            Self::SecretNotFound { what, .. }
            | Self::SecretNotMarked { what, .. }
            | Self::SecretKeyMissing { what, .. }
            | Self::SecretKeyEmpty { what, .. } => *what != CA_BUNDLE,
            Self::KeyNameMissing { field } | Self::InvalidObjectName { field, .. } => {
                field.starts_with("spec.auth")
            }
            Self::InvalidEndpoint { .. }
            | Self::TlsWithoutHttps { .. }
            | Self::InsecureHttp { .. }
            | Self::EndpointNotAllowed { .. }
            | Self::CaSourceAmbiguous
            | Self::InsecureWithCa
            | Self::CaNameMissing { .. }
            | Self::PollIntervalOutOfRange { .. }
            | Self::MaxResponseSizeOutOfRange { .. }
            | Self::ListingTimeoutOutOfRange { .. }
            | Self::ConfigMapNotFound { .. }
            | Self::ConfigMapNotMarked { .. }
            | Self::ConfigMapKeyMissing { .. }
            | Self::ConfigMapKeyEmpty { .. }
            | Self::InvalidCa { .. } => false,
        }
    }
}

/// What a Secret holds, in messages.
const JWT_KEY: &str = "JWT signing key";
const TOKEN: &str = "token";
const CA_BUNDLE: &str = "CA bundle";

/// A key in a Secret or ConfigMap of the operator's credentials namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRef {
    pub name: String,
    pub key: String,
}

/// Where the CA bundle comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaSource {
    Secret(KeyRef),
    ConfigMap(KeyRef),
}

/// How requests authenticate, before the Secret is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthPlan {
    /// Mint tokens for `user` with the key in `key`.
    Jwt {
        key: KeyRef,
        user: String,
        lifetime: Duration,
    },
    /// Send the token in `token`.
    Token { token: KeyRef },
}

impl AuthPlan {
    /// The Secret key holding the credential.
    pub fn secret(&self) -> &KeyRef {
        match self {
            Self::Jwt { key, .. } => key,
            Self::Token { token } => token,
        }
    }

    /// How the credentials are described to humans (status messages).
    pub fn describe(&self) -> String {
        match self {
            Self::Jwt { key, user, .. } => format!(
                "tokens minted for Slurm user {user:?} with the key in Secret {:?}",
                key.name
            ),
            Self::Token { token } => format!("the token in Secret {:?}", token.name),
        }
    }
}

/// What a valid spec asks for, before the referenced objects are read.
#[derive(Debug, Clone)]
pub struct ConfigPlan {
    /// Endpoint and defaults; the CA is added by [`ConfigPlan::build`].
    pub client: ClientConfig,
    pub auth: AuthPlan,
    pub ca: Option<CaSource>,
    pub insecure_skip_verify: bool,
    pub poll_interval: Duration,
    pub api_version: ApiVersion,
}

/// The objects a [`ConfigPlan`] references, as read from the operator's credentials namespace (`None`: not found).
#[derive(Clone, Default)]
pub struct Sources {
    pub auth: Option<Secret>,
    pub ca_secret: Option<Secret>,
    pub ca_config_map: Option<ConfigMap>,
}

/// Names and keys only: a derived `Debug` would print the Secrets' data.
impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fn secret(secret: &Option<Secret>) -> Option<(Option<&str>, Vec<&str>)> {
            secret.as_ref().map(|s| {
                let keys = s.data.iter().flat_map(|d| d.keys()).map(String::as_str);
                (s.metadata.name.as_deref(), keys.collect())
            })
        }
        f.debug_struct("Sources")
            .field("auth", &secret(&self.auth))
            .field("ca_secret", &secret(&self.ca_secret))
            .field("ca_config_map", &self.ca_config_map)
            .finish()
    }
}

/// A connection ready for [`ClusterRegistry::upsert`](crate::state::registry::ClusterRegistry::upsert).
pub struct Validated {
    pub client: ClientConfig,
    pub settings: ConnectionSettings,
    pub credentials: Arc<Credentials>,
}

impl std::fmt::Debug for Validated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Validated")
            .field("client", &self.client)
            .field("settings", &self.settings)
            .field("credentials", &self.credentials)
            .finish()
    }
}

fn not_empty(value: &str, error: ConfigError) -> Result<(), ConfigError> {
    if value.trim().is_empty() {
        Err(error)
    } else {
        Ok(())
    }
}

fn object_name(name: &str, field: &'static str) -> Result<(), ConfigError> {
    if is_object_name(name) {
        Ok(())
    } else {
        Err(ConfigError::InvalidObjectName {
            field,
            name: name.to_owned(),
        })
    }
}

fn key_ref(
    name: &str,
    key: &str,
    name_field: &'static str,
    key_field: &'static str,
) -> Result<KeyRef, ConfigError> {
    not_empty(name, ConfigError::SecretNameMissing { field: name_field })?;
    object_name(name, name_field)?;
    not_empty(key, ConfigError::KeyNameMissing { field: key_field })?;
    Ok(KeyRef {
        name: name.to_owned(),
        key: key.to_owned(),
    })
}

/// Whether `endpoint` is one of the `allowed` slurmrestd origins (scheme, host and port, the
/// default port when none is written); an empty list allows any. The operator's own setting
/// (`--allowed-endpoint`): a SlurmCluster cannot point the operator (and its tokens) elsewhere.
pub fn endpoint_allowed(endpoint: &url::Url, allowed: &[url::Url]) -> Result<(), ConfigError> {
    let origin = |url: &url::Url| {
        (
            url.scheme().to_owned(),
            url.host_str().map(str::to_ascii_lowercase),
            url.port_or_known_default(),
        )
    };
    if allowed.is_empty() || allowed.iter().any(|a| origin(a) == origin(endpoint)) {
        return Ok(());
    }
    Err(ConfigError::EndpointNotAllowed {
        endpoint: endpoint.to_string(),
        allowed: allowed
            .iter()
            .map(|a| a.origin().ascii_serialization())
            .collect::<Vec<_>>()
            .join(", "),
    })
}

/// The facade's version for a pin in the spec. Every value the CRD admits is one the facade
/// speaks (`crd` tests check the two lists agree), so nothing is lost here.
fn pinned_version(version: ApiVersion) -> Option<crate::slurm::ApiVersion> {
    version.pinned().and_then(|name| name.parse().ok())
}

/// Check the spec on its own and say what it needs from the namespace.
pub fn plan(spec: &SlurmClusterSpec) -> Result<ConfigPlan, ConfigError> {
    let client = ClientConfig::new(&spec.endpoint)
        .map_err(|e| ConfigError::InvalidEndpoint {
            // Without the credentials a refused URL may carry (typed into it).
            endpoint: crate::slurm::location_without_secrets(&spec.endpoint),
            detail: match e {
                SlurmError::InvalidEndpoint { detail, .. } => detail,
                other => other.to_string(),
            },
        })?
        .allow_plaintext(spec.allow_insecure_http)
        .with_api_version(pinned_version(spec.api_version));

    if client.endpoint.scheme() == "http" && !spec.allow_insecure_http {
        return Err(ConfigError::InsecureHttp {
            endpoint: spec.endpoint.clone(),
        });
    }

    let (ca, insecure_skip_verify) = match &spec.tls {
        None => (None, false),
        Some(tls) => {
            if client.endpoint.scheme() != "https" {
                return Err(ConfigError::TlsWithoutHttps {
                    endpoint: spec.endpoint.clone(),
                });
            }
            let ca = match (&tls.ca_secret_ref, &tls.ca_config_map_ref) {
                (Some(_), Some(_)) => return Err(ConfigError::CaSourceAmbiguous),
                (Some(r), None) => {
                    not_empty(
                        &r.name,
                        ConfigError::CaNameMissing {
                            field: "spec.tls.caSecretRef.name",
                            kind: "Secret",
                        },
                    )?;
                    object_name(&r.name, "spec.tls.caSecretRef.name")?;
                    not_empty(
                        &r.key,
                        ConfigError::KeyNameMissing {
                            field: "spec.tls.caSecretRef.key",
                        },
                    )?;
                    Some(CaSource::Secret(KeyRef {
                        name: r.name.clone(),
                        key: r.key.clone(),
                    }))
                }
                (None, Some(r)) => {
                    not_empty(
                        &r.name,
                        ConfigError::CaNameMissing {
                            field: "spec.tls.caConfigMapRef.name",
                            kind: "ConfigMap",
                        },
                    )?;
                    object_name(&r.name, "spec.tls.caConfigMapRef.name")?;
                    not_empty(
                        &r.key,
                        ConfigError::KeyNameMissing {
                            field: "spec.tls.caConfigMapRef.key",
                        },
                    )?;
                    Some(CaSource::ConfigMap(KeyRef {
                        name: r.name.clone(),
                        key: r.key.clone(),
                    }))
                }
                (None, None) => None,
            };
            if ca.is_some() && tls.insecure_skip_verify {
                return Err(ConfigError::InsecureWithCa);
            }
            (ca, tls.insecure_skip_verify)
        }
    };

    let auth = match spec.auth.method() {
        None if spec.auth.jwt.is_none() => return Err(ConfigError::AuthMethodMissing),
        None => return Err(ConfigError::AuthMethodAmbiguous),
        Some(AuthMethod::Jwt(jwt)) => {
            let key = key_ref(
                &jwt.key_secret_ref.name,
                &jwt.key_secret_ref.key,
                "spec.auth.jwt.keySecretRef.name",
                "spec.auth.jwt.keySecretRef.key",
            )?;
            not_empty(&jwt.user, ConfigError::JwtUserMissing)?;
            if jwt.user.chars().any(char::is_control) {
                return Err(ConfigError::InvalidJwtUser {
                    user: jwt.user.clone(),
                });
            }
            let lifetime = jwt.lifetime.as_std();
            if !(MIN_TOKEN_LIFETIME..=MAX_TOKEN_LIFETIME).contains(&lifetime) {
                return Err(ConfigError::TokenLifetimeOutOfRange { lifetime });
            }
            AuthPlan::Jwt {
                key,
                user: jwt.user.clone(),
                lifetime,
            }
        }
        Some(AuthMethod::Token(token)) => AuthPlan::Token {
            token: key_ref(
                &token.name,
                &token.key,
                "spec.auth.tokenSecretRef.name",
                "spec.auth.tokenSecretRef.key",
            )?,
        },
    };

    let poll_interval = spec.poll_interval.as_std();
    if !(MIN_POLL_INTERVAL..=MAX_POLL_INTERVAL).contains(&poll_interval) {
        return Err(ConfigError::PollIntervalOutOfRange {
            interval: poll_interval,
        });
    }

    let mut client = client.with_max_response_bytes(max_response_bytes(spec)?);
    if let Some(timeout) = &spec.listing_timeout {
        let timeout = timeout.as_std();
        if !(MIN_LISTING_TIMEOUT..=MAX_LISTING_TIMEOUT).contains(&timeout) {
            return Err(ConfigError::ListingTimeoutOutOfRange { timeout });
        }
        client = client.with_listing_timeout(timeout);
    }

    Ok(ConfigPlan {
        client,
        auth,
        ca,
        insecure_skip_verify,
        poll_interval,
        api_version: spec.api_version,
    })
}

/// `spec.maxResponseSize` in bytes, [`DEFAULT_MAX_RESPONSE_BYTES`] when unset.
fn max_response_bytes(spec: &SlurmClusterSpec) -> Result<u64, ConfigError> {
    let Some(size) = &spec.max_response_size else {
        return Ok(DEFAULT_MAX_RESPONSE_BYTES);
    };
    quantity::to_bytes(&size.0)
        .ok()
        .and_then(|bytes| u64::try_from(bytes).ok())
        .filter(|bytes| (MIN_RESPONSE_BYTES..=MAX_RESPONSE_BYTES).contains(bytes))
        .ok_or_else(|| ConfigError::MaxResponseSizeOutOfRange {
            size: size.0.clone(),
        })
}

/// The bytes under `key` in a Secret, `None` when the key is absent.
fn secret_value<'a>(secret: &'a Secret, key: &str) -> Option<&'a [u8]> {
    secret
        .data
        .as_ref()
        .and_then(|data| data.get(key))
        .map(|value| value.0.as_slice())
}

/// Whether an object carries the credentials label: the only Secrets and ConfigMaps the
/// operator reads.
fn marked(meta: &ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .and_then(|labels| labels.get(CREDENTIALS_LABEL))
        .is_some_and(|value| value == "true")
}

fn required_secret_value<'a>(
    secret: Option<&'a Secret>,
    r: &KeyRef,
    what: &'static str,
) -> Result<&'a [u8], ConfigError> {
    let secret = secret.ok_or_else(|| ConfigError::SecretNotFound {
        name: r.name.clone(),
        what,
    })?;
    if !marked(&secret.metadata) {
        return Err(ConfigError::SecretNotMarked {
            name: r.name.clone(),
            what,
        });
    }
    let value = secret_value(secret, &r.key).ok_or_else(|| ConfigError::SecretKeyMissing {
        name: r.name.clone(),
        key: r.key.clone(),
        what,
    })?;
    if value.iter().all(u8::is_ascii_whitespace) {
        return Err(ConfigError::SecretKeyEmpty {
            name: r.name.clone(),
            key: r.key.clone(),
            what,
        });
    }
    Ok(value)
}

fn required_config_map_value<'a>(
    config_map: Option<&'a ConfigMap>,
    r: &KeyRef,
) -> Result<&'a [u8], ConfigError> {
    let config_map = config_map.ok_or_else(|| ConfigError::ConfigMapNotFound {
        name: r.name.clone(),
    })?;
    if !marked(&config_map.metadata) {
        return Err(ConfigError::ConfigMapNotMarked {
            name: r.name.clone(),
        });
    }
    let value = config_map
        .data
        .as_ref()
        .and_then(|data| data.get(&r.key))
        .map(|s| s.as_bytes())
        .or_else(|| {
            config_map
                .binary_data
                .as_ref()
                .and_then(|data| data.get(&r.key))
                .map(|b| b.0.as_slice())
        })
        .ok_or_else(|| ConfigError::ConfigMapKeyMissing {
            name: r.name.clone(),
            key: r.key.clone(),
        })?;
    if value.iter().all(u8::is_ascii_whitespace) {
        return Err(ConfigError::ConfigMapKeyEmpty {
            name: r.name.clone(),
            key: r.key.clone(),
        });
    }
    Ok(value)
}

fn credentials_error(error: AuthError) -> ConfigError {
    ConfigError::InvalidCredentials {
        detail: crate::error_chain::Chain(&error).to_string(),
    }
}

impl ConfigPlan {
    /// Names of the Secrets this plan reads.
    pub fn secrets(&self) -> Vec<&str> {
        let mut names = vec![self.auth.secret().name.as_str()];
        if let Some(CaSource::Secret(r)) = &self.ca {
            names.push(r.name.as_str());
        }
        names
    }

    /// Check what was read and produce the connection.
    pub fn build(&self, sources: &Sources) -> Result<Validated, ConfigError> {
        let credentials = match &self.auth {
            AuthPlan::Jwt {
                key,
                user,
                lifetime,
            } => {
                let bytes = required_secret_value(sources.auth.as_ref(), key, JWT_KEY)?;
                Credentials::minted(bytes.to_vec(), user.clone(), *lifetime).map_err(
                    |e| match e {
                        AuthError::InvalidHeaderValue { .. } => {
                            ConfigError::InvalidJwtUser { user: user.clone() }
                        }
                        other => credentials_error(other),
                    },
                )?
            }
            AuthPlan::Token { token } => {
                let bytes = required_secret_value(sources.auth.as_ref(), token, TOKEN)?;
                let text = std::str::from_utf8(bytes).map_err(|_| ConfigError::TokenNotUtf8 {
                    name: token.name.clone(),
                    key: token.key.clone(),
                })?;
                Credentials::token(text, None).map_err(|e| match e {
                    AuthError::InvalidHeaderValue { .. } => ConfigError::InvalidToken {
                        name: token.name.clone(),
                        key: token.key.clone(),
                    },
                    other => credentials_error(other),
                })?
            }
        };

        let ca_pem = match &self.ca {
            None => None,
            Some(CaSource::Secret(r)) => Some((
                r,
                "Secret",
                required_secret_value(sources.ca_secret.as_ref(), r, CA_BUNDLE)?,
            )),
            Some(CaSource::ConfigMap(r)) => Some((
                r,
                "ConfigMap",
                required_config_map_value(sources.ca_config_map.as_ref(), r)?,
            )),
        };
        let client = self.client.clone().with_tls(TlsOptions {
            ca_pem: ca_pem.map(|(_, _, pem)| pem.to_vec()),
            insecure_skip_verify: self.insecure_skip_verify,
        });
        if let Some((r, kind, _)) = ca_pem {
            // Build (and drop) the HTTP client: the one place that parses the bundle exactly as
            // the real client will. No I/O happens here.
            client.http_client().map_err(|e| ConfigError::InvalidCa {
                kind,
                name: r.name.clone(),
                key: r.key.clone(),
                detail: match e {
                    SlurmError::InvalidCa { detail } => detail,
                    other => other.to_string(),
                },
            })?;
        }

        let settings = ConnectionSettings {
            fingerprint: fingerprint(&client, self.api_version),
            poller: PollerConfig {
                interval: self.poll_interval,
            },
        };
        Ok(Validated {
            client,
            settings,
            credentials: Arc::new(credentials),
        })
    }
}

/// Everything in the client configuration that needs a new client when it changes. The CA bundle
/// is hashed (the hash only lives in memory and is compared within this process).
fn fingerprint(client: &ClientConfig, api_version: ApiVersion) -> String {
    let ca = client.tls.ca_pem.as_ref().map(|pem| {
        let mut hasher = DefaultHasher::new();
        pem.hash(&mut hasher);
        hasher.finish()
    });
    format!(
        "endpoint={} ca={} insecure={} api={:?} timeout={:?} listing={:?} connect={:?} retries={} max_response={}",
        client.endpoint,
        ca.map_or_else(|| "system".to_owned(), |h| format!("{h:016x}")),
        client.tls.insecure_skip_verify,
        api_version,
        client.request_timeout,
        client.listing_timeout,
        client.connect_timeout,
        client.retry.max_retries,
        client.max_response_bytes,
    )
}

/// The Secrets a spec references, even when the spec is otherwise invalid: a Secret event is
/// mapped to the Clusters that name it, so that creating a missing Secret fixes a SlurmCluster.
pub fn referenced_secrets(spec: &SlurmClusterSpec) -> impl Iterator<Item = &str> {
    let jwt = spec
        .auth
        .jwt
        .as_ref()
        .map(|j| j.key_secret_ref.name.as_str());
    let token = spec.auth.token_secret_ref.as_ref().map(|t| t.name.as_str());
    let ca = spec
        .tls
        .as_ref()
        .and_then(|t| t.ca_secret_ref.as_ref())
        .map(|r| r.name.as_str());
    [jwt, token, ca].into_iter().flatten()
}

/// The ConfigMaps a spec references (the CA bundle).
pub fn referenced_config_maps(spec: &SlurmClusterSpec) -> impl Iterator<Item = &str> {
    spec.tls
        .as_ref()
        .and_then(|t| t.ca_config_map_ref.as_ref())
        .map(|r| r.name.as_str())
        .into_iter()
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use k8s_openapi::ByteString;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use kube::api::ObjectMeta;

    use super::*;
    use crate::crd::{CaRef, ClusterAuth, ClusterTls, JwtAuth, JwtKeySecretRef, TokenSecretRef};

    #[test]
    fn every_version_the_crd_admits_is_one_the_facade_speaks() {
        // The CRD's enum, as the API server will admit it.
        let schema = serde_json::to_value(schemars::schema_for!(ApiVersion)).unwrap();
        let admitted: Vec<String> = schema["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect();
        let spoken: Vec<String> = crate::slurm::ApiVersion::ALL
            .iter()
            .map(|v| v.to_string())
            .collect();
        let mut pins = admitted.clone();
        pins.retain(|v| v != "auto");
        assert_eq!(pins, spoken, "admitted: {admitted:?}");
        for name in admitted {
            let crd: ApiVersion = serde_json::from_value(serde_json::json!(name)).unwrap();
            assert_eq!(
                pinned_version(crd).map(|v| v.to_string()),
                crd.pinned().map(str::to_owned),
                "{name}"
            );
        }
        let spec_pin = |v| {
            plan(&SlurmClusterSpec {
                api_version: v,
                ..jwt_spec()
            })
            .unwrap()
            .client
            .api_version
        };
        assert_eq!(spec_pin(ApiVersion::Auto), None);
        assert_eq!(
            spec_pin(ApiVersion::V0_0_41),
            Some(crate::slurm::ApiVersion::V0_0_41)
        );
    }

    /// A refused endpoint is named in the status, an Event and the log: never with the
    /// credentials or token typed into it.
    #[test]
    fn a_refused_endpoint_is_shown_without_what_may_be_credentials() {
        for (endpoint, shown) in [
            (
                "https://u:hunter2@slurmrestd:6820",
                "https://slurmrestd:6820/",
            ),
            (
                "https://slurmrestd:6820/?token=hunter2",
                "https://slurmrestd:6820/",
            ),
            (
                "https://slurmrestd:6820/#hunter2",
                "https://slurmrestd:6820/",
            ),
            (
                "u:hunter2@slurmrestd",
                "(not shown: it may hold credentials)",
            ),
        ] {
            let mut spec = jwt_spec();
            spec.endpoint = endpoint.into();
            let Err(error) = plan(&spec) else {
                panic!("{endpoint} accepted");
            };
            assert_eq!(error.reason(), "InvalidEndpoint", "{endpoint}");
            let message = error.to_string();
            assert!(!message.contains("hunter2"), "{message}");
            assert!(message.contains(shown), "{endpoint}: {message}");
        }
    }

    fn jwt_spec() -> SlurmClusterSpec {
        SlurmClusterSpec {
            endpoint: "http://slurmrestd.slurm.svc:6820".into(),
            auth: ClusterAuth {
                jwt: Some(JwtAuth {
                    key_secret_ref: JwtKeySecretRef {
                        name: "jwt".into(),
                        key: "jwt_hs256.key".into(),
                    },
                    user: "slurm".into(),
                    lifetime: crate::crd::Duration::from_secs(300),
                }),
                token_secret_ref: None,
            },
            tls: None,
            poll_interval: crate::crd::Duration::from_secs(1),
            max_response_size: None,
            listing_timeout: None,
            api_version: ApiVersion::Auto,
            allow_insecure_http: true,
            access: Vec::new(),
            node_set_namespaces: Vec::new(),
        }
    }

    fn token_spec() -> SlurmClusterSpec {
        SlurmClusterSpec {
            auth: ClusterAuth {
                jwt: None,
                token_secret_ref: Some(TokenSecretRef {
                    name: "tok".into(),
                    key: "token".into(),
                }),
            },
            ..jwt_spec()
        }
    }

    fn https(mut spec: SlurmClusterSpec, tls: ClusterTls) -> SlurmClusterSpec {
        spec.endpoint = "https://slurmrestd.example:6820".into();
        spec.tls = Some(tls);
        spec
    }

    fn ca_ref(name: &str) -> CaRef {
        CaRef {
            name: name.into(),
            key: "ca.crt".into(),
        }
    }

    fn tls(secret: Option<CaRef>, config_map: Option<CaRef>, insecure: bool) -> ClusterTls {
        ClusterTls {
            ca_secret_ref: secret,
            ca_config_map_ref: config_map,
            insecure_skip_verify: insecure,
        }
    }

    /// A Secret marked as SlurmCluster credentials.
    fn secret(name: &str, data: &[(&str, &[u8])]) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(
                    [(CREDENTIALS_LABEL.to_owned(), "true".to_owned())]
                        .into_iter()
                        .collect(),
                ),
                ..Default::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.to_vec())))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    fn config_map(name: &str, data: &[(&str, &str)]) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some([(CREDENTIALS_LABEL.to_owned(), "true".to_owned())].into()),
                ..Default::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        }
    }

    fn ca_pem() -> String {
        rcgen::generate_simple_self_signed(vec!["slurmrestd.example".into()])
            .unwrap()
            .cert
            .pem()
    }

    fn key_sources() -> Sources {
        Sources {
            auth: Some(secret("jwt", &[("jwt_hs256.key", b"0123456789abcdef")])),
            ..Default::default()
        }
    }

    fn build(spec: &SlurmClusterSpec, sources: &Sources) -> Result<Validated, ConfigError> {
        plan(spec)?.build(sources)
    }

    /// Every bad input, with the reason it must produce. Reasons are distinct per case (the
    /// `SecretNotFound`/`SecretKeyMissing`/... family is shared by the auth Secret and the CA
    /// Secret on purpose: same fix, different name in the message).
    #[test]
    fn every_bad_input_has_its_own_reason() {
        let mut cases: Vec<(&str, SlurmClusterSpec, Sources, &str)> = Vec::new();
        let mut case = |what, spec, sources, reason| cases.push((what, spec, sources, reason));

        for bad in [
            "",
            "slurmrestd:6820",
            "ftp://h",
            "http://",
            "http://u:p@h",
            "http://h/?q=1",
        ] {
            let mut spec = jwt_spec();
            spec.endpoint = bad.into();
            case("bad URL", spec, key_sources(), "InvalidEndpoint");
        }
        let mut spec = jwt_spec();
        spec.tls = Some(tls(None, None, false));
        case("tls on http", spec, key_sources(), "TLSRequiresHTTPS");
        case(
            "both CA sources",
            https(jwt_spec(), tls(Some(ca_ref("a")), Some(ca_ref("b")), false)),
            key_sources(),
            "CASourceAmbiguous",
        );
        case(
            "insecure with CA",
            https(jwt_spec(), tls(Some(ca_ref("a")), None, true)),
            key_sources(),
            "InsecureWithCA",
        );
        case(
            "CA Secret unnamed",
            https(jwt_spec(), tls(Some(ca_ref("")), None, false)),
            key_sources(),
            "CANameMissing",
        );
        let mut spec = jwt_spec();
        spec.auth.jwt = None;
        case("neither auth", spec, key_sources(), "AuthMethodMissing");
        let mut spec = jwt_spec();
        spec.auth.token_secret_ref = token_spec().auth.token_secret_ref;
        case("both auth", spec, key_sources(), "AuthMethodAmbiguous");
        let mut spec = jwt_spec();
        if let Some(jwt) = spec.auth.jwt.as_mut() {
            jwt.key_secret_ref.name = String::new();
        }
        case(
            "missing secret name",
            spec,
            key_sources(),
            "SecretNameMissing",
        );
        let mut spec = token_spec();
        if let Some(t) = spec.auth.token_secret_ref.as_mut() {
            t.name = " ".into();
        }
        case(
            "blank token secret name",
            spec,
            key_sources(),
            "SecretNameMissing",
        );
        let mut spec = jwt_spec();
        if let Some(jwt) = spec.auth.jwt.as_mut() {
            jwt.key_secret_ref.name = "../../kube-system/secrets/jwt".into();
        }
        case(
            "key Secret name with a path",
            spec,
            key_sources(),
            "InvalidObjectName",
        );
        let mut spec = token_spec();
        if let Some(t) = spec.auth.token_secret_ref.as_mut() {
            t.name = "kube-system/tok".into();
        }
        case(
            "token Secret name with a slash",
            spec,
            key_sources(),
            "InvalidObjectName",
        );
        case(
            "CA Secret name with a path",
            https(jwt_spec(), tls(Some(ca_ref("../ca")), None, false)),
            key_sources(),
            "InvalidObjectName",
        );
        case(
            "CA ConfigMap name with a path",
            https(jwt_spec(), tls(None, Some(ca_ref("x/../../ca")), false)),
            key_sources(),
            "InvalidObjectName",
        );
        let mut spec = jwt_spec();
        if let Some(jwt) = spec.auth.jwt.as_mut() {
            jwt.key_secret_ref.key = String::new();
        }
        case("missing key name", spec, key_sources(), "KeyNameMissing");
        let mut spec = jwt_spec();
        if let Some(jwt) = spec.auth.jwt.as_mut() {
            jwt.user = String::new();
        }
        case("empty user", spec, key_sources(), "JWTUserMissing");
        let mut spec = jwt_spec();
        if let Some(jwt) = spec.auth.jwt.as_mut() {
            jwt.user = "slurm\nX-Evil: 1".into();
        }
        case("user with a newline", spec, key_sources(), "InvalidJWTUser");
        for lifetime in [29, 15 * 60 + 1] {
            let mut spec = jwt_spec();
            if let Some(jwt) = spec.auth.jwt.as_mut() {
                jwt.lifetime = crate::crd::Duration::from_secs(lifetime);
            }
            case("lifetime", spec, key_sources(), "TokenLifetimeOutOfRange");
        }
        for millis in [99, 300_001] {
            let mut spec = jwt_spec();
            spec.poll_interval = crate::crd::Duration::from_millis(millis);
            case(
                "poll interval",
                spec,
                key_sources(),
                "PollIntervalOutOfRange",
            );
        }
        let mut spec = jwt_spec();
        spec.max_response_size = Some(Quantity("2Gi".into()));
        case(
            "max response size",
            spec,
            key_sources(),
            "MaxResponseSizeOutOfRange",
        );
        let mut spec = jwt_spec();
        spec.listing_timeout = Some(crate::crd::Duration::from_secs(7_200));
        case(
            "listing timeout",
            spec,
            key_sources(),
            "ListingTimeoutOutOfRange",
        );
        case(
            "secret absent",
            jwt_spec(),
            Sources::default(),
            "SecretNotFound",
        );
        let mut unmarked = secret("jwt", &[("jwt_hs256.key", b"0123456789abcdef")]);
        unmarked.metadata.labels = None;
        case(
            "a Secret not marked as credentials",
            jwt_spec(),
            Sources {
                auth: Some(unmarked),
                ..Default::default()
            },
            "SecretNotMarked",
        );
        let mut plain = jwt_spec();
        plain.allow_insecure_http = false;
        case(
            "plain http without the admin's opt-in",
            plain,
            Sources::default(),
            "InsecureEndpoint",
        );
        case(
            "key missing",
            jwt_spec(),
            Sources {
                auth: Some(secret("jwt", &[("other", b"x")])),
                ..Default::default()
            },
            "SecretKeyMissing",
        );
        case(
            "secret without data",
            jwt_spec(),
            Sources {
                auth: Some(Secret {
                    data: None,
                    ..secret("jwt", &[])
                }),
                ..Default::default()
            },
            "SecretKeyMissing",
        );
        case(
            "empty key",
            jwt_spec(),
            Sources {
                auth: Some(secret("jwt", &[("jwt_hs256.key", b"")])),
                ..Default::default()
            },
            "SecretKeyEmpty",
        );
        case(
            "whitespace token",
            token_spec(),
            Sources {
                auth: Some(secret("tok", &[("token", b" \n")])),
                ..Default::default()
            },
            "SecretKeyEmpty",
        );
        case(
            "non-UTF-8 token",
            token_spec(),
            Sources {
                auth: Some(secret("tok", &[("token", &[0xff, 0xfe, 0x41])])),
                ..Default::default()
            },
            "TokenNotUTF8",
        );
        case(
            "token with a control character",
            token_spec(),
            Sources {
                auth: Some(secret("tok", &[("token", b"abc\x01def")])),
                ..Default::default()
            },
            "InvalidToken",
        );
        let ca_secret_spec = https(jwt_spec(), tls(Some(ca_ref("ca")), None, false));
        case(
            "CA Secret absent",
            ca_secret_spec.clone(),
            key_sources(),
            "SecretNotFound",
        );
        case(
            "garbage CA PEM",
            ca_secret_spec,
            Sources {
                ca_secret: Some(secret("ca", &[("ca.crt", b"not a certificate")])),
                ..key_sources()
            },
            "InvalidCA",
        );
        let ca_cm_spec = https(jwt_spec(), tls(None, Some(ca_ref("ca")), false));
        case(
            "CA ConfigMap absent",
            ca_cm_spec.clone(),
            key_sources(),
            "ConfigMapNotFound",
        );
        let mut unmarked = config_map("ca", &[("ca.crt", "x")]);
        unmarked.metadata.labels = None;
        case(
            "a CA ConfigMap not marked as credentials (kube-root-ca.crt, say)",
            ca_cm_spec.clone(),
            Sources {
                ca_config_map: Some(unmarked),
                ..key_sources()
            },
            "ConfigMapNotMarked",
        );
        case(
            "CA ConfigMap key missing",
            ca_cm_spec.clone(),
            Sources {
                ca_config_map: Some(config_map("ca", &[("other", "x")])),
                ..key_sources()
            },
            "ConfigMapKeyMissing",
        );
        case(
            "CA ConfigMap key empty",
            ca_cm_spec,
            Sources {
                ca_config_map: Some(config_map("ca", &[("ca.crt", "")])),
                ..key_sources()
            },
            "ConfigMapKeyEmpty",
        );

        let mut seen = BTreeSet::new();
        for (what, spec, sources, want) in &cases {
            let error = build(spec, sources).expect_err(what);
            assert_eq!(error.reason(), *want, "{what}: {error}");
            assert!(super::super::status::is_pascal_case(want), "{want}");
            assert!(!error.to_string().is_empty());
            seen.insert(*want);
        }
        // Every variant is covered by some case.
        assert_eq!(seen.len(), 28, "{seen:?}");
    }

    #[test]
    fn only_allowed_endpoints_when_the_operator_lists_them() {
        let url = |s: &str| url::Url::parse(s).unwrap();
        let allowed = [
            url("https://slurmrestd.hpc.example.org:6820"),
            url("http://slurmrestd.slurm.svc"),
        ];
        for ok in [
            "https://slurmrestd.hpc.example.org:6820",
            "https://SLURMRESTD.hpc.example.org:6820/",
            "http://slurmrestd.slurm.svc:80",
        ] {
            assert_eq!(endpoint_allowed(&url(ok), &allowed), Ok(()), "{ok}");
        }
        for refused in [
            "https://slurmrestd.hpc.example.org:6821",
            "http://slurmrestd.hpc.example.org:6820",
            "https://metadata.internal:6820",
            "https://slurmrestd.hpc.example.org.evil.example:6820",
        ] {
            let error = endpoint_allowed(&url(refused), &allowed).unwrap_err();
            assert_eq!(error.reason(), "EndpointNotAllowed", "{refused}");
            assert!(
                error
                    .to_string()
                    .contains("https://slurmrestd.hpc.example.org:6820"),
                "{error}"
            );
        }
        // No list: any endpoint (the SlurmCluster is the admin's anyway).
        assert_eq!(endpoint_allowed(&url("https://anywhere:1"), &[]), Ok(()));
    }

    #[test]
    fn object_names_are_rfc_1123_subdomains() {
        let long_label = "a".repeat(63);
        let ok = [
            "jwt",
            "slurm-jwt-key",
            "a.b-c.d",
            "0",
            "9a",
            long_label.as_str(),
        ];
        for name in ok {
            assert!(is_object_name(name), "{name:?}");
        }
        let too_long = "a".repeat(254);
        let bad = [
            "",
            "..",
            "../x",
            "a/b",
            "a..b",
            ".a",
            "a.",
            "-a",
            "a-",
            "A",
            "a_b",
            "a b",
            "a%2Fb",
            "a?b",
            "é",
            too_long.as_str(),
        ];
        for name in bad {
            assert!(!is_object_name(name), "{name:?}");
        }
        assert!(is_object_name(&"a".repeat(253)));
    }

    #[test]
    fn a_valid_jwt_spec_builds_a_connection() {
        let spec = jwt_spec();
        let plan = plan(&spec).unwrap();
        assert_eq!(plan.secrets(), ["jwt"]);
        assert!(plan.auth.describe().contains("\"slurm\""));
        let v = plan.build(&key_sources()).unwrap();
        assert_eq!(
            v.client.endpoint.as_str(),
            "http://slurmrestd.slurm.svc:6820/"
        );
        assert_eq!(v.settings.poller.interval, Duration::from_secs(1));
        assert_eq!(v.client.max_response_bytes, DEFAULT_MAX_RESPONSE_BYTES);
        assert_eq!(v.credentials.user(), Some("slurm"));
        assert!(!format!("{v:?}").contains("0123456789abcdef"));
    }

    #[test]
    fn max_response_size_bounds_every_answer_of_the_cluster() {
        let with = |size: &str| {
            let mut spec = jwt_spec();
            spec.max_response_size = Some(Quantity(size.into()));
            plan(&spec).map(|plan| plan.client.max_response_bytes)
        };
        assert_eq!(with("64Mi"), Ok(64 << 20));
        assert_eq!(with("1Mi"), Ok(MIN_RESPONSE_BYTES));
        assert_eq!(with("1Gi"), Ok(MAX_RESPONSE_BYTES));
        assert_eq!(with("100M"), Ok(100_000_000));
        assert_eq!(with("67108864"), Ok(64 << 20));
        for bad in ["1023Ki", "1025Mi", "1Ti", "0", "-64Mi", "lots", ""] {
            let error = with(bad).unwrap_err();
            assert_eq!(error.reason(), "MaxResponseSizeOutOfRange", "{bad:?}");
            assert!(!error.concerns_credentials(), "{bad:?}");
            let message = error.to_string();
            assert!(
                message.contains("spec.maxResponseSize") && message.contains(&format!("{bad:?}")),
                "{message}"
            );
        }
    }

    #[test]
    fn listing_timeout_applies_to_listings_within_its_bounds() {
        let with = |secs: Option<u64>| {
            let mut spec = jwt_spec();
            spec.listing_timeout = secs.map(crate::crd::Duration::from_secs);
            plan(&spec).map(|plan| plan.client.listing_timeout)
        };
        assert_eq!(
            with(None),
            Ok(crate::slurm::config::DEFAULT_LISTING_TIMEOUT)
        );
        assert_eq!(with(Some(600)), Ok(Duration::from_secs(600)));
        assert_eq!(with(Some(30)), Ok(MIN_LISTING_TIMEOUT));
        assert_eq!(with(Some(3_600)), Ok(MAX_LISTING_TIMEOUT));
        for bad in [29, 3_601] {
            let error = with(Some(bad)).unwrap_err();
            assert_eq!(error.reason(), "ListingTimeoutOutOfRange", "{bad}");
            assert!(!error.concerns_credentials(), "{bad}");
            assert!(error.to_string().contains("spec.listingTimeout"), "{error}");
        }
        // Only the listings wait longer: every other request keeps its own timeout.
        let patient = plan(&{
            let mut spec = jwt_spec();
            spec.listing_timeout = Some(crate::crd::Duration::from_secs(600));
            spec
        })
        .unwrap();
        assert_eq!(
            patient.client.request_timeout,
            plan(&jwt_spec()).unwrap().client.request_timeout
        );
    }

    #[test]
    fn a_valid_token_spec_builds_a_connection() {
        let sources = Sources {
            auth: Some(secret("tok", &[("token", b"eyJhbGciOi.abc.def\n")])),
            ..Default::default()
        };
        let v = build(&token_spec(), &sources).unwrap();
        assert_eq!(v.credentials.user(), None);
    }

    #[test]
    fn a_ca_bundle_from_a_secret_or_config_map_is_accepted() {
        let pem = ca_pem();
        let v = build(
            &https(jwt_spec(), tls(Some(ca_ref("ca")), None, false)),
            &Sources {
                ca_secret: Some(secret("ca", &[("ca.crt", pem.as_bytes())])),
                ..key_sources()
            },
        )
        .unwrap();
        assert_eq!(v.client.tls.ca_pem.as_deref(), Some(pem.as_bytes()));
        let v = build(
            &https(jwt_spec(), tls(None, Some(ca_ref("ca")), false)),
            &Sources {
                ca_config_map: Some(config_map("ca", &[("ca.crt", &pem)])),
                ..key_sources()
            },
        )
        .unwrap();
        assert!(v.client.tls.ca_pem.is_some());
        let v = build(&https(jwt_spec(), tls(None, None, true)), &key_sources()).unwrap();
        assert!(v.client.tls.insecure_skip_verify);
    }

    #[test]
    fn the_fingerprint_follows_the_connection_not_the_credentials() {
        let base = build(&jwt_spec(), &key_sources()).unwrap().settings;
        let rotated = build(
            &jwt_spec(),
            &Sources {
                auth: Some(secret("jwt", &[("jwt_hs256.key", b"another key entirely")])),
                ..Default::default()
            },
        )
        .unwrap()
        .settings;
        assert_eq!(base, rotated, "a new key is swapped in place");

        let mut moved = jwt_spec();
        moved.endpoint = "http://elsewhere:6820".into();
        let moved = build(&moved, &key_sources()).unwrap().settings;
        assert_ne!(base.fingerprint, moved.fingerprint);

        let mut slower = jwt_spec();
        slower.poll_interval = crate::crd::Duration::from_secs(5);
        let slower = build(&slower, &key_sources()).unwrap().settings;
        assert_eq!(base.fingerprint, slower.fingerprint);
        assert_ne!(base, slower, "a new poll interval restarts the poller");

        let mut larger = jwt_spec();
        larger.max_response_size = Some(Quantity("64Mi".into()));
        let larger = build(&larger, &key_sources()).unwrap().settings;
        assert_ne!(
            base.fingerprint, larger.fingerprint,
            "a new bound on answers makes a new client"
        );

        let mut patient = jwt_spec();
        patient.listing_timeout = Some(crate::crd::Duration::from_secs(600));
        let patient = build(&patient, &key_sources()).unwrap().settings;
        assert_ne!(
            base.fingerprint, patient.fingerprint,
            "a new listing timeout makes a new client"
        );

        let pem_a = ca_pem();
        let pem_b = ca_pem();
        let with_ca = |pem: &str| {
            build(
                &https(jwt_spec(), tls(Some(ca_ref("ca")), None, false)),
                &Sources {
                    ca_secret: Some(secret("ca", &[("ca.crt", pem.as_bytes())])),
                    ..key_sources()
                },
            )
            .unwrap()
            .settings
            .fingerprint
        };
        assert_ne!(with_ca(&pem_a), with_ca(&pem_b));
        assert_eq!(with_ca(&pem_a), with_ca(&pem_a));
    }

    #[test]
    fn referenced_objects_are_found_even_in_invalid_specs() {
        let mut spec = https(
            jwt_spec(),
            tls(Some(ca_ref("ca")), Some(ca_ref("cm")), false),
        );
        spec.auth.token_secret_ref = token_spec().auth.token_secret_ref;
        let secrets: Vec<_> = referenced_secrets(&spec).collect();
        assert_eq!(secrets, ["jwt", "tok", "ca"]);
        let config_maps: Vec<_> = referenced_config_maps(&spec).collect();
        assert_eq!(config_maps, ["cm"]);
    }
}
