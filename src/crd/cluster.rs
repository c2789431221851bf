//! `SlurmCluster`: one Slurm cluster, reached through its slurmrestd, registered cluster-wide by
//! the platform admin: where it is, the credentials (read only from the operator's credentials
//! namespace, only from Secrets marked for it), and which namespaces may run jobs on it as which
//! Slurm user ([`ClusterAccess`]).

use k8s_openapi::apimachinery::pkg::{
    api::resource::Quantity,
    apis::meta::v1::{Condition, LabelSelector, Time},
};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{DNS_LABEL, DNS_SUBDOMAIN, SECRET_KEY, condition, duration::Duration};

/// CEL for `spec.maxResponseSize`: an int-or-string quantity from 1Mi to 1Gi (`string(self)`
/// as in [`super::POSITIVE_QUANTITY`]). The operator checks the same bounds
/// (`MIN_RESPONSE_BYTES`, `MAX_RESPONSE_BYTES` in the cluster controller's config).
const RESPONSE_SIZE_RULE: &str = "isQuantity(string(self)) \
    && !quantity(string(self)).isLessThan(quantity('1Mi')) \
    && !quantity(string(self)).isGreaterThan(quantity('1Gi'))";

/// Desired state of a SlurmCluster: where its slurmrestd is and how to authenticate to it.
// kube's `printcolumn(...)` lists repeat keys such as `type_`, which clippy mistakes for
// duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "slurm.rs",
    version = "v1alpha1",
    kind = "SlurmCluster",
    plural = "slurmclusters",
    status = "SlurmClusterStatus",
    derive = "PartialEq",
    doc = "A Slurm cluster reached through slurmrestd, registered by the platform admin. \
           SlurmJobs and SlurmNodeSets name it in spec.clusterName; spec.access says which \
           namespaces may use it and as which Slurm user.",
    shortname = "scluster",
    category = "slurm",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].status"#,
        description = "Whether slurmrestd answers with valid credentials"
    ),
    printcolumn(
        name = "Endpoint",
        type_ = "string",
        json_path = ".spec.endpoint",
        description = "slurmrestd URL"
    ),
    printcolumn(
        name = "Slurm",
        type_ = "string",
        json_path = ".status.slurmRelease",
        description = "Slurm release reported by slurmrestd"
    ),
    printcolumn(
        name = "Nodes",
        type_ = "integer",
        json_path = ".status.nodes.total",
        description = "Nodes known to slurmctld"
    ),
    printcolumn(
        name = "REST API",
        type_ = "string",
        json_path = ".status.restApiVersion",
        description = "slurmrestd API version in use",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.tls) || self.endpoint.lowerAscii().startsWith('https://')")
        .message("tls applies only to an https:// endpoint")
        .field_path(".tls"),
    validation = Rule::new("!self.endpoint.lowerAscii().startsWith('http://') || self.allowInsecureHttp")
        .message("endpoint must be an https:// URL: over http:// the tokens cross the network \
                  readable by anyone on the path (set allowInsecureHttp: true to accept that)")
        .field_path(".endpoint"),
    validation = Rule::new(CLUSTER_USER_RULE)
        .message("an access entry's slurmUser is auth.jwt.user, the cluster's own user (a Slurm \
                  administrator): the namespaces' jobs could cancel any job, drain any node and \
                  issue tokens for any user; map them to an unprivileged Slurm user (or set the \
                  entry's allowClusterUser: true for a cluster one team owns)")
        .field_path(".access")
)]
pub struct SlurmClusterSpec {
    /// URL of slurmrestd, e.g. `https://slurmrestd.example.org:6820` (`http://` only with
    /// `allowInsecureHttp`). Paths below it (such as `/slurm/v0.0.42/...`) are added by the
    /// operator. The operator follows no redirect.
    #[schemars(length(min = 1, max = 2048))]
    #[x_kube(validation = Rule::new("isURL(self) && url(self).getScheme() in ['http', 'https']")
        .message("endpoint must be an http:// or https:// URL, e.g. https://slurmrestd.example.org:6820"))]
    pub endpoint: String,

    /// Accept an `http://` endpoint: tokens then cross the network in the clear. Only for a
    /// slurmrestd reached over a network the admin trusts (e.g. inside the Kubernetes cluster).
    /// Defaults to false.
    #[serde(default)]
    pub allow_insecure_http: bool,

    /// How the operator authenticates to slurmrestd (`auth/jwt`). Set exactly one of `jwt` or
    /// `tokenSecretRef`. The Secrets are read from the operator's credentials namespace and must
    /// carry the label `slurm.rs/credentials: "true"`.
    pub auth: ClusterAuth,

    /// TLS settings for an https:// endpoint. Without it the system trust roots are used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<ClusterTls>,

    /// How often the operator polls slurmrestd for jobs and nodes, as a duration such as `500ms`
    /// or `2s`. Between 100ms and 5m. A quiet poll asks only about the operator's own jobs and
    /// the newest ids (every minute, about all of them).
    #[serde(default = "default_poll_interval")]
    #[x_kube(validation = Rule::new("duration(self) >= duration('100ms') && duration(self) <= duration('5m')")
        .message("pollInterval must be between 100ms and 5m"))]
    pub poll_interval: Duration,

    /// The largest answer the operator reads from this slurmrestd, as a quantity such as
    /// `64Mi`: between 1Mi and 1Gi, default 32Mi. A longer answer is refused unread (reason
    /// `ResponseTooLarge`), so that a broken or hostile slurmrestd cannot make the operator hold
    /// an endless body. Raise it only for a cluster whose real answers are that large: the list
    /// of every job's state is ~80 bytes a job (32Mi: ~400 000 jobs), the node list ~2.3 KiB a
    /// node (32Mi: ~14 000 nodes); the operator's memory limit must allow for such an answer
    /// and its decoded records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(RESPONSE_SIZE_RULE)
        .message("maxResponseSize must be a quantity between 1Mi and 1Gi, such as 64Mi"))]
    pub max_response_size: Option<Quantity>,

    /// How long the operator waits for slurmrestd's list of every job (at start, and about
    /// every minute to see what a quiet poll cannot), as a duration such as `10m`: between 30s
    /// and 1h, default 5m. slurmrestd takes ~0.2–0.8 ms a job in the queue to build it (at
    /// 100 000 jobs: 24.11 ~24 s, 26.05 ~82 s): raise it only for a queue of several hundred
    /// thousand jobs (reason `Timeout` on polls). Every other request waits at most 30s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("duration(self) >= duration('30s') && duration(self) <= duration('1h')")
        .message("listingTimeout must be between 30s and 1h"))]
    pub listing_timeout: Option<Duration>,

    /// slurmrestd REST API version to speak. `auto` picks the newest version both the operator
    /// and slurmrestd support (asked of slurmrestd, never guessed from the release); a version
    /// (`v0.0.40` to `v0.0.45`) pins it, and a slurmrestd that does not serve it gets
    /// `Ready=False` with reason `UnsupportedVersion`. (Named `restApiVersion`, not
    /// `apiVersion`, so that it never shadows the object's own `apiVersion`.)
    #[serde(default, rename = "restApiVersion")]
    pub api_version: ApiVersion,

    /// Which namespaces may run SlurmJobs on this cluster, and as which Slurm user. The first
    /// entry that matches a SlurmJob's namespace applies; a namespace no entry matches cannot
    /// use the cluster. Jobs never run as the cluster's own user (`auth.jwt.user`) unless an
    /// entry names it and sets `allowClusterUser`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub access: Vec<ClusterAccess>,

    /// Namespaces, by name, whose SlurmNodeSets may join this cluster. A SlurmNodeSet's pods run
    /// slurmd with the cluster's `slurm.key` and its nodes take jobs of every user, so this is
    /// the admin's list, by name only (not by label). A SlurmNodeSet in any other namespace gets
    /// `Ready=False` with reason `NodeSetNotAllowed` and the operator does nothing for it: no
    /// pod is created or deleted, no node drained or resumed. Empty (the default): none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    // Each name bounded in the schema, not in the rule: the API server prices a rule by the
    // longest string the schema allows (3 MiB without `maxLength`), and refuses the CRD when
    // `matches` over 1 024 of those exceeds its cost limit.
    #[schemars(length(max = 1024), inner(length(max = 63)))]
    #[x_kube(validation = Rule::new("self.all(n, n.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'))")
        .message("nodeSetNamespaces must be namespace names: lowercase letters, digits and '-', at most 63"))]
    pub node_set_namespaces: Vec<String>,
}

/// One grant of a SlurmCluster to namespaces.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("size(self.namespaces) > 0 || has(self.namespaceSelector)")
    .message("access needs namespaces or a namespaceSelector"))]
#[x_kube(validation = Rule::new(
    "!has(self.namespaceSelector) \
     || (has(self.namespaceSelector.matchLabels) && size(self.namespaceSelector.matchLabels) > 0) \
     || (has(self.namespaceSelector.matchExpressions) && size(self.namespaceSelector.matchExpressions) > 0)")
    .message("namespaceSelector must name labels (matchLabels or matchExpressions): an empty \
              selector grants every namespace, kube-system and the operator's own included; to \
              grant every namespace on purpose, select it: matchExpressions: [{key: \
              kubernetes.io/metadata.name, operator: Exists}]"))]
pub struct ClusterAccess {
    /// Namespaces, by name, this entry grants the cluster to.
    #[serde(default)]
    // A schema pattern, not a CEL rule as for `nodeSetNamespaces`: the API server prices a rule
    // here once per `access` entry, and `matches` over 1 024 names times 256 entries is past its
    // limit (it would refuse the CRD); a pattern is not priced.
    #[schemars(length(max = 1024), inner(length(max = 63), regex(pattern = DNS_LABEL)))]
    pub namespaces: Vec<String>,

    /// Namespaces, by label, this entry grants the cluster to (in addition to `namespaces`).
    /// It must name labels: an empty selector, which would match every namespace, is refused
    /// (and grants nothing should one get past admission).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,

    /// The Slurm user the jobs of these namespaces run as: the operator mints each submit's
    /// token for this user (which needs `auth.jwt`). Slurm accounts them to this user. Never
    /// `root`: the tenants' scripts would run as root on the Slurm nodes. It must be the name
    /// Slurm reports for the user's jobs (the jobs' ownership tags are checked against it): where
    /// SSSD gives fully-qualified names, `alice@example.org`.
    #[schemars(length(min = 1, max = 256))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z_][a-z0-9_.@-]*[$]?$')")
        .message("slurmUser must be a Slurm (POSIX) user name such as alice or alice@example.org"))]
    #[x_kube(validation = Rule::new("self != 'root'")
        .message("slurmUser cannot be root: the namespaces' job scripts would run as root on \
                  the Slurm nodes; map them to an unprivileged Slurm user"))]
    pub slurm_user: String,

    /// Let `slurmUser` be the user the operator itself acts as (`auth.jwt.user`, or the user of
    /// `auth.tokenSecretRef`'s token, which can act as no one else). That user polls and drains
    /// nodes: a Slurm administrator, whose jobs could cancel any job, drain any node and issue
    /// tokens for any user (root included). Only for a cluster one team owns, or a test setup.
    /// Defaults to false: such an entry is refused (reason `ClusterUserNotAllowed`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_cluster_user: bool,

    /// Slurm accounts these namespaces may charge (`spec.account`). Empty: any the user may;
    /// otherwise a SlurmJob that names none is charged to the first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub accounts: Vec<String>,

    /// Partitions these namespaces may submit to (`spec.partition`). Empty: any the user may;
    /// otherwise a SlurmJob that names none goes to the first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub partitions: Vec<String>,

    /// QoS these namespaces may ask for (`spec.qos`). Empty: any the user may; otherwise a
    /// SlurmJob that names none gets the first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub qos: Vec<String>,
}

/// No access entry names the cluster's own user (`auth.jwt.user`) unless it says so
/// (`allowClusterUser`); `access::check` refuses the same at run time, and for a token's user.
const CLUSTER_USER_RULE: &str = "!has(self.auth.jwt) || !has(self.access) || self.access.all(a, \
     a.slurmUser != self.auth.jwt.user || (has(a.allowClusterUser) && a.allowClusterUser))";

/// 500 ms: a change in Slurm reaches a SlurmJob's status within 1 s (p99, hack/bench.sh) at a
/// fraction of what one listing of a large queue a second cost slurmctld before incremental polls.
fn default_poll_interval() -> Duration {
    Duration::from_millis(500)
}

/// Credentials for slurmrestd. Exactly one of `jwt` or `tokenSecretRef` is set.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.jwt) != has(self.tokenSecretRef)")
    .message("auth must set exactly one of jwt or tokenSecretRef"))]
pub struct ClusterAuth {
    /// Mint short-lived tokens with the cluster's JWT signing key (the `jwt_hs256.key` that
    /// slurmctld and slurmdbd use). Preferred: the operator renews tokens itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwt: Option<JwtAuth>,

    /// Use a pre-issued token (e.g. from `scontrol token lifespan=...`). The operator re-reads
    /// the Secret when it changes; renewing the token before it expires is up to you.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_secret_ref: Option<TokenSecretRef>,
}

/// The authentication method a valid [`ClusterAuth`] selects.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AuthMethod<'a> {
    /// Sign tokens with the cluster's JWT key.
    Jwt(&'a JwtAuth),
    /// Use a token stored in a Secret.
    Token(&'a TokenSecretRef),
}

impl ClusterAuth {
    /// The selected method, or `None` when zero or both are set (which the API server rejects;
    /// this is the operator's own check for objects that bypassed validation).
    pub fn method(&self) -> Option<AuthMethod<'_>> {
        match (&self.jwt, &self.token_secret_ref) {
            (Some(jwt), None) => Some(AuthMethod::Jwt(jwt)),
            (None, Some(token)) => Some(AuthMethod::Token(token)),
            _ => None,
        }
    }
}

/// Sign tokens locally with the cluster's HS256 key.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JwtAuth {
    /// Secret (in the operator's credentials namespace) holding the JWT signing key.
    pub key_secret_ref: JwtKeySecretRef,

    /// The cluster's own Slurm user: the operator polls, drains and resumes nodes as this user.
    /// Jobs run as the user their namespace's `access` entry names. Defaults to `slurm`.
    #[serde(default = "default_jwt_user")]
    #[schemars(length(min = 1, max = 256))]
    pub user: String,

    /// Lifetime of each minted token, between 30s and 15m. Tokens are renewed before they
    /// expire. Defaults to `15m`.
    #[serde(default = "default_jwt_lifetime")]
    #[x_kube(validation = Rule::new("duration(self) >= duration('30s') && duration(self) <= duration('15m')")
        .message("lifetime must be between 30s and 15m"))]
    pub lifetime: Duration,
}

fn default_jwt_user() -> String {
    "slurm".to_owned()
}

fn default_jwt_lifetime() -> Duration {
    Duration::from_secs(15 * 60)
}

/// A key in a Secret in the operator's credentials namespace holding the JWT signing key.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JwtKeySecretRef {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN))]
    pub name: String,

    /// Key in the Secret whose value is the raw signing key. Defaults to `jwt_hs256.key`.
    #[serde(default = "default_jwt_key")]
    #[schemars(length(min = 1, max = 253), regex(pattern = SECRET_KEY))]
    pub key: String,
}

fn default_jwt_key() -> String {
    "jwt_hs256.key".to_owned()
}

/// A key in a Secret in the operator's credentials namespace holding a slurmrestd token.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TokenSecretRef {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN))]
    pub name: String,

    /// Key in the Secret whose value is the token. Defaults to `token`.
    #[serde(default = "default_token_key")]
    #[schemars(length(min = 1, max = 253), regex(pattern = SECRET_KEY))]
    pub key: String,
}

fn default_token_key() -> String {
    "token".to_owned()
}

/// TLS settings for talking to slurmrestd.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!(has(self.caSecretRef) && has(self.caConfigMapRef))")
        .message("tls may set at most one of caSecretRef or caConfigMapRef"),
    validation = Rule::new("!self.insecureSkipVerify || !(has(self.caSecretRef) || has(self.caConfigMapRef))")
        .message("insecureSkipVerify cannot be combined with caSecretRef or caConfigMapRef")
)]
pub struct ClusterTls {
    /// PEM CA bundle in a Secret in the operator's credentials namespace, used instead of the system trust
    /// roots to verify slurmrestd's certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_secret_ref: Option<CaRef>,

    /// PEM CA bundle in a ConfigMap in the operator's credentials namespace, labelled
    /// `slurm.rs/credentials: "true"` as its Secrets are, used instead of the system trust roots
    /// to verify slurmrestd's certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_config_map_ref: Option<CaRef>,

    /// Do not verify slurmrestd's certificate. For testing only: anyone on the path can read the
    /// token. Defaults to false.
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

/// A key in a Secret or ConfigMap in the operator's credentials namespace holding PEM certificates.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CaRef {
    /// Name of the Secret or ConfigMap.
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_SUBDOMAIN))]
    pub name: String,

    /// Key holding the PEM bundle. Defaults to `ca.crt`.
    #[serde(default = "default_ca_key")]
    #[schemars(length(min = 1, max = 253), regex(pattern = SECRET_KEY))]
    pub key: String,
}

fn default_ca_key() -> String {
    "ca.crt".to_owned()
}

/// slurmrestd REST API version: `auto` or one the operator speaks (`v0.0.40` to `v0.0.45`).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ApiVersion {
    // Variant docs are deliberately plain comments: documented unit variants make schemars emit
    // `oneOf` branches instead of a flat string enum.
    // Negotiate: the newest version both sides support.
    #[default]
    #[serde(rename = "auto")]
    Auto,
    // Slurm 23.11 to 24.11.
    #[serde(rename = "v0.0.40")]
    V0_0_40,
    // Slurm 24.05 to 25.05.
    #[serde(rename = "v0.0.41")]
    V0_0_41,
    // Slurm 24.11 to 26.05.
    #[serde(rename = "v0.0.42")]
    V0_0_42,
    // Slurm 25.05 and later.
    #[serde(rename = "v0.0.43")]
    V0_0_43,
    // Slurm 25.11 and later.
    #[serde(rename = "v0.0.44")]
    V0_0_44,
    // Slurm 26.05 and later.
    #[serde(rename = "v0.0.45")]
    V0_0_45,
}

impl ApiVersion {
    /// The pinned version's name (`v0.0.42`), or `None` for `auto`.
    pub fn pinned(self) -> Option<&'static str> {
        match self {
            Self::Auto => None,
            Self::V0_0_40 => Some("v0.0.40"),
            Self::V0_0_41 => Some("v0.0.41"),
            Self::V0_0_42 => Some("v0.0.42"),
            Self::V0_0_43 => Some("v0.0.43"),
            Self::V0_0_44 => Some("v0.0.44"),
            Self::V0_0_45 => Some("v0.0.45"),
        }
    }
}

/// Observed state of a SlurmCluster, written by the operator.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SlurmClusterStatus {
    /// Latest observations: `Ready` (slurmrestd answers and the operator can use it),
    /// `Authenticated` (slurmrestd accepted the credentials), `JobsListed` (the periodic listing
    /// of every job answers), `DuplicateProtection`, and kstatus's `Reconciling`/`Stalled`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "condition::schema")]
    pub conditions: Vec<Condition>,

    /// The `.metadata.generation` this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// `ClusterName` from slurm.conf of the Slurm cluster last reached, as reported by
    /// slurmrestd; kept while it cannot be reached. The job ids the SlurmJobs of this SlurmCluster
    /// record are that cluster's: while any has not ended, the operator does not follow
    /// `spec.endpoint` to another Slurm cluster (reason `SlurmClusterChanged`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,

    /// Slurm release of slurmrestd, e.g. `24.11.5`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slurm_release: Option<String>,

    /// slurmrestd REST API version in use (pinned or negotiated), e.g. `v0.0.42`.
    #[serde(
        default,
        rename = "restApiVersion",
        skip_serializing_if = "Option::is_none"
    )]
    pub api_version: Option<String>,

    /// Node counts by state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<ClusterNodeCounts>,

    /// Names of the cluster's partitions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partitions: Vec<String>,

    /// When slurmrestd last answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_contact_time: Option<Time>,
}

/// Node counts by Slurm state. A node may count in several states (e.g. drain and idle).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterNodeCounts {
    /// All nodes.
    #[serde(default)]
    pub total: i32,
    /// Nodes with no allocated CPUs.
    #[serde(default)]
    pub idle: i32,
    /// Nodes fully allocated.
    #[serde(default)]
    pub allocated: i32,
    /// Nodes partly allocated.
    #[serde(default)]
    pub mixed: i32,
    /// Nodes draining or drained.
    #[serde(default)]
    pub drain: i32,
    /// Nodes down (not responding or set down).
    #[serde(default)]
    pub down: i32,
}
