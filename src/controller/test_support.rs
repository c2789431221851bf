//! Test scaffolding for controllers: a [`Context`] whose kube client talks to a mocked API server
//! (tower-test), and an [`ApiServerVerifier`] that asserts each API call in order — method, path,
//! query, content type and the parts of the body that matter — and answers it the way the API
//! server would.
//!
//! A test spawns its scenario (a sequence of `expect_*` calls) on the verifier, runs the
//! reconcile, then awaits the scenario and checks nothing else was called.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::core::v1::Secret;
use kube::client::Body;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use tower_test::mock::{self, Handle, SendResponse};

use crate::controller::Context;
use crate::crd::FIELD_MANAGER;
use crate::crd::{FINALIZER, SlurmCluster, SlurmClusterStatus};
use crate::metrics::Metrics;

/// The credentials namespace of [`Context::test`].
pub const TEST_CREDENTIALS_NAMESPACE: &str = "slurm";

/// The tag key of [`Context::test`], so that tests can sign the records they make up.
pub fn test_tag_key() -> crate::slurm::tag::TagKey {
    match crate::slurm::tag::TagKey::new(&[0x5a; 32]) {
        Ok(key) => key,
        Err(error) => unreachable!("a 32-byte key is long enough: {error}"),
    }
}

impl Context {
    /// A context whose kube client is served by the returned verifier. Its operator started
    /// (and acts since) two seconds ago: an object a test makes now, with a creation time of
    /// whole seconds as the API server gives, is younger than that start.
    pub fn test() -> (Self, ApiServerVerifier) {
        let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(service, "default");
        let mut ctx = Self::new(client, Metrics::new());
        ctx.started_at -= chrono::TimeDelta::seconds(2);
        *ctx.acting_since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = ctx.started_at;
        ctx.credentials_namespace = TEST_CREDENTIALS_NAMESPACE.to_owned();
        ctx.tag_key = test_tag_key();
        (ctx, ApiServerVerifier(handle))
    }
}

/// One API call as the mocked API server saw it.
#[derive(Debug)]
pub struct Call {
    pub method: Method,
    pub path: String,
    pub query: String,
    pub content_type: String,
    /// The body as JSON (`Null` when empty).
    pub body: Value,
}

impl Call {
    /// Whether the query string has `key=value`.
    pub fn has_query(&self, key: &str, value: &str) -> bool {
        self.query
            .split('&')
            .any(|pair| pair.split_once('=') == Some((key, value)))
    }
}

/// The mocked API server's side.
pub struct ApiServerVerifier(Handle<Request<Body>, Response<Body>>);

fn json_response(status: StatusCode, body: &impl serde::Serialize) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(body).unwrap()))
        .unwrap()
}

/// The API server's 404 for `kind` `name`.
pub fn not_found(kind: &str, name: &str) -> Response<Body> {
    json_response(
        StatusCode::NOT_FOUND,
        &json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": format!("{kind} \"{name}\" not found"),
            "reason": "NotFound",
            "details": {"name": name, "kind": kind},
            "code": 404
        }),
    )
}

fn cluster_path(cluster: &SlurmCluster) -> String {
    object_path(cluster)
}

/// The API path of `object` (namespaced or not).
fn object_path<K: Resource<DynamicType = ()>>(object: &K) -> String {
    format!(
        "{}/{}",
        K::url_path(&(), object.meta().namespace.as_deref()),
        object.name_any()
    )
}

impl ApiServerVerifier {
    /// The verifier of a client made from `handle`'s pair (`tower_test::mock::pair`).
    pub fn from_handle(handle: Handle<Request<Body>, Response<Body>>) -> Self {
        Self(handle)
    }

    /// The next call. Panics when none comes within 10 s (a reconcile that is stuck, or that
    /// made fewer calls than the scenario expects).
    pub async fn next(&mut self) -> (Call, SendResponse<Response<Body>>) {
        let (request, send) = tokio::time::timeout(Duration::from_secs(10), self.0.next_request())
            .await
            .expect("the reconcile made no further API call within 10s")
            .expect("the client was dropped before the expected API call");
        let (parts, body) = request.into_parts();
        let bytes = body.collect_bytes().await.unwrap();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        let call = Call {
            method: parts.method,
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().unwrap_or_default().to_owned(),
            content_type: parts
                .headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned(),
            body,
        };
        (call, send)
    }

    /// Nothing more is called: waits briefly for a stray call and fails on one.
    pub async fn expect_no_more_calls(&mut self) {
        if let Ok(Some((request, _))) =
            tokio::time::timeout(Duration::from_millis(200), self.0.next_request()).await
        {
            panic!(
                "unexpected API call: {} {}",
                request.method(),
                request.uri()
            );
        }
    }

    /// `GET` of a Secret in `namespace`, answered with `secret` (or 404).
    pub async fn expect_get_secret(&mut self, namespace: &str, name: &str, secret: Option<Secret>) {
        let (call, send) = self.next().await;
        assert_eq!(call.method, Method::GET, "{call:?}");
        assert_eq!(
            call.path,
            format!("/api/v1/namespaces/{namespace}/secrets/{name}"),
            "Secrets are read from the SlurmCluster's own namespace"
        );
        send.send_response(match secret {
            Some(secret) => json_response(StatusCode::OK, &secret),
            None => not_found("secrets", name),
        });
    }

    /// Server-side apply of the SlurmCluster's status with the one field manager. Returns the status
    /// sent; answers with the SlurmCluster carrying it.
    pub async fn expect_status_apply(&mut self, cluster: &SlurmCluster) -> SlurmClusterStatus {
        let (call, send) = self.next().await;
        assert_eq!(call.method, Method::PATCH, "{call:?}");
        assert_eq!(call.path, format!("{}/status", cluster_path(cluster)));
        assert_eq!(
            call.content_type, "application/apply-patch+yaml",
            "server-side apply"
        );
        assert!(call.has_query("fieldManager", FIELD_MANAGER), "{call:?}");
        assert!(call.has_query("force", "true"), "{call:?}");
        assert_eq!(call.body["apiVersion"], "slurm.rs/v1alpha1");
        assert_eq!(call.body["kind"], "SlurmCluster");
        assert!(
            call.body.get("spec").is_none(),
            "the status apply must not own spec fields"
        );
        let status: SlurmClusterStatus =
            serde_json::from_value(call.body["status"].clone()).unwrap();
        let mut answer = cluster.clone();
        answer.status = Some(status.clone());
        send.send_response(json_response(StatusCode::OK, &answer));
        status
    }

    /// An Event about `cluster` (`events.k8s.io/v1`; a cluster-scoped object's Events go to
    /// `default`): a new one, or the next of a series the recorder saw before (a patch of it).
    /// Returns the Event's body.
    pub async fn expect_event(
        &mut self,
        cluster: &SlurmCluster,
        type_: &str,
        reason: &str,
    ) -> Value {
        let (call, send) = self.next().await;
        let events = format!(
            "/apis/events.k8s.io/v1/namespaces/{}/events",
            cluster.namespace().unwrap_or_else(|| "default".into())
        );
        match call.method {
            Method::POST => assert_eq!(call.path, events),
            Method::PATCH => assert!(call.path.starts_with(&format!("{events}/")), "{call:?}"),
            _ => panic!("not an Event: {call:?}"),
        }
        assert_eq!(call.body["type"], type_, "{:#}", call.body);
        assert_eq!(call.body["reason"], reason, "{:#}", call.body);
        assert_eq!(call.body["reportingController"], FIELD_MANAGER);
        assert_eq!(call.body["regarding"]["kind"], "SlurmCluster");
        assert_eq!(call.body["regarding"]["name"], cluster.name_any());
        send.send_response(json_response(StatusCode::CREATED, &call.body));
        call.body
    }

    /// The finalizer helper's JSON patch adding `slurm.rs/cleanup` to an object without one
    /// (a SlurmCluster, a SlurmNodeSet).
    pub async fn expect_finalizer_added<K>(&mut self, object: &K)
    where
        K: Resource<DynamicType = ()> + Clone + serde::Serialize,
    {
        let (call, send) = self.next().await;
        assert_eq!(call.method, Method::PATCH, "{call:?}");
        assert_eq!(call.path, object_path(object));
        assert_eq!(call.content_type, "application/json-patch+json");
        assert_eq!(
            call.body,
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
            ])
        );
        let mut answer = object.clone();
        answer.meta_mut().finalizers = Some(vec![FINALIZER.to_owned()]);
        send.send_response(json_response(StatusCode::OK, &answer));
    }

    /// The finalizer helper's JSON patch removing `slurm.rs/cleanup` (at index 0).
    pub async fn expect_finalizer_removed<K>(&mut self, object: &K)
    where
        K: Resource<DynamicType = ()> + Clone + serde::Serialize,
    {
        let (call, send) = self.next().await;
        assert_eq!(call.method, Method::PATCH, "{call:?}");
        assert_eq!(call.path, object_path(object));
        assert_eq!(call.content_type, "application/json-patch+json");
        assert_eq!(
            call.body,
            json!([
                {"op": "test", "path": "/metadata/finalizers/0", "value": FINALIZER},
                {"op": "remove", "path": "/metadata/finalizers/0"},
            ])
        );
        let mut answer = object.clone();
        answer.meta_mut().finalizers = None;
        send.send_response(json_response(StatusCode::OK, &answer));
    }
}

/// The real local Slurm from `hack/slurm-up.sh`, as its env file describes it; `None` (the
/// test is skipped, with a message) when it is not up, unless `SLURM_OPERATOR_REQUIRE_SLURM=1`.
/// The same rules as `tests/common`.
pub fn local_slurm() -> Option<HashMap<String, String>> {
    let required = std::env::var("SLURM_OPERATOR_REQUIRE_SLURM").is_ok_and(|v| v == "1");
    let path = std::env::var("SLURM_ENV_FILE").map_or_else(
        |_| {
            let flavour = std::env::var("SLURM_FLAVOUR").unwrap_or_else(|_| "trixie".into());
            PathBuf::from(format!("/var/tmp/slurm-operator/{flavour}/env"))
        },
        PathBuf::from,
    );
    match std::fs::read_to_string(&path) {
        Ok(text) => Some(
            text.lines()
                .filter_map(|line| line.split_once('='))
                .map(|(k, v)| {
                    let v = v.trim().trim_matches('"').trim_matches('\'');
                    (k.trim().to_owned(), v.to_owned())
                })
                .collect(),
        ),
        Err(error) if required => panic!(
            "SLURM_OPERATOR_REQUIRE_SLURM=1 but {} is unreadable: {error}",
            path.display()
        ),
        Err(_) => {
            eprintln!(
                "skipped: no local Slurm ({} missing); run hack/slurm-up.sh",
                path.display()
            );
            None
        }
    }
}

/// Register the local Slurm (`slurm`, from [`local_slurm`]) as SlurmCluster `namespace/name` in `ctx`:
/// a real client and a real poller (300 ms), as the SlurmCluster controller would. Returns once the
/// poller has confirmed a complete node list after this call, with the client.
pub async fn register_local_cluster(
    ctx: &Context,
    slurm: &HashMap<String, String>,
    namespace: &str,
    name: &str,
) -> crate::slurm::SlurmClient {
    use std::sync::Arc;

    use kube::runtime::reflector::ObjectRef;

    use crate::slurm::{ClientConfig, Credentials};
    use crate::state::poller::PollerConfig;
    use crate::state::registry::ConnectionSettings;

    let since = chrono::Utc::now();
    let key = std::fs::read(&slurm["SLURM_JWT_KEY"]).unwrap();
    let credentials = Arc::new(
        Credentials::minted(key, slurm["SLURM_USER"].clone(), Duration::from_secs(300)).unwrap(),
    );
    let config = ClientConfig::new(&slurm["SLURM_REST_URL"])
        .unwrap()
        .allow_plaintext(true);
    let cluster = ObjectRef::<SlurmCluster>::new(name);
    let settings = ConnectionSettings {
        fingerprint: format!("local/{namespace}/{name}"),
        poller: PollerConfig {
            interval: Duration::from_millis(300),
        },
    };
    let metrics = ctx.metrics.clone();
    let tag_key = ctx.tag_key.clone();
    ctx.clusters
        .upsert(
            &cluster,
            config,
            settings,
            credentials,
            |label, client, poller, events| {
                crate::state::poller::spawn(label, client, poller, tag_key, events, metrics)
            },
        )
        .unwrap();
    let handle = ctx.clusters.get(&cluster).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let synced = handle.index.borrow().nodes_synced_at;
        if synced.is_some_and(|t| t > since) && handle.index.borrow().health.is_up() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the poller never confirmed the node list"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    handle.client.clone()
}

/// `hack/slurm-node.sh ARGS --flavour <flavour of slurm>`: a dynamic slurmd standing in for a
/// pod. Panics when the script fails.
pub fn slurm_node_script(slurm: &HashMap<String, String>, args: &[&str]) -> String {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("hack/slurm-node.sh");
    let flavour = slurm.get("SLURM_FLAVOUR").map_or("trixie", String::as_str);
    let output = std::process::Command::new("bash")
        .arg(&script)
        .args(args)
        .args(["--flavour", flavour])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "slurm-node.sh {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A key minting tokens for Slurm user `slurm`, as a SlurmCluster's `auth.jwt` (its default
/// user) is read.
pub fn slurm_key() -> crate::slurm::Credentials {
    crate::slurm::Credentials::minted(b"test-key".to_vec(), "slurm", Duration::from_secs(900))
        .unwrap()
}

/// A ready token for Slurm user `slurm`, given without its user (a JWT whose `sun` says it), as
/// a SlurmCluster's `tokenSecretRef` is read.
pub fn slurm_token() -> crate::slurm::Credentials {
    use secrecy::ExposeSecret;

    let jwt = slurm_key().token_at(std::time::SystemTime::now()).unwrap();
    crate::slurm::Credentials::token(jwt.expose_secret(), None).unwrap()
}

/// Register SlurmCluster `namespace/name` in `ctx` with a client for `endpoint` (e.g. the unreachable
/// `http://127.0.0.1:1`) and an index the test writes through the returned sender, starting at
/// `state`: the reconcile sees exactly what the test put there.
///
/// `ClusterRegistry::upsert` only takes a poller it starts itself, so a real one runs: it polls
/// `endpoint` into an index of its own that nothing reads, with its own event channel and
/// metrics, and stops when the registration is dropped.
pub fn register_with_index(
    ctx: &Context,
    namespace: &str,
    name: &str,
    endpoint: &str,
    state: crate::state::index::ClusterState,
) -> tokio::sync::watch::Sender<std::sync::Arc<crate::state::index::ClusterState>> {
    // A key for the cluster's user, as the tests' SlurmClusters (`auth.jwt`, user `slurm`) say.
    register_with_credentials(ctx, namespace, name, endpoint, state, slurm_key())
}

/// [`register_with_index`] with the client acting with `credentials`.
pub fn register_with_credentials(
    ctx: &Context,
    namespace: &str,
    name: &str,
    endpoint: &str,
    state: crate::state::index::ClusterState,
    credentials: crate::slurm::Credentials,
) -> tokio::sync::watch::Sender<std::sync::Arc<crate::state::index::ClusterState>> {
    use std::sync::Arc;

    use kube::runtime::reflector::ObjectRef;

    use crate::slurm::ClientConfig;
    use crate::state::poller::PollerConfig;
    use crate::state::registry::ConnectionSettings;

    let (writer, reader) = tokio::sync::watch::channel(Arc::new(state));
    let cluster = ObjectRef::<SlurmCluster>::new(name);
    let settings = ConnectionSettings {
        fingerprint: format!("test-index/{namespace}/{name}"),
        poller: PollerConfig {
            interval: Duration::from_secs(3600),
        },
    };
    ctx.clusters
        .upsert(
            &cluster,
            ClientConfig::new(endpoint).unwrap().allow_plaintext(true),
            settings,
            Arc::new(credentials),
            |label, client, config, _| {
                let (events, _) = tokio::sync::broadcast::channel(16);
                let (poller, _its_own_index) = crate::state::poller::spawn(
                    label,
                    client,
                    config,
                    ctx.tag_key.clone(),
                    events,
                    Metrics::new(),
                );
                (poller, reader)
            },
        )
        .unwrap();
    writer
}
