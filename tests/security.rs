//! The security properties of what ships (SECURITY.md), each as tests that fail when it regresses:
//!
//! - no secret material (JWT key, tokens, the operator's own API token) in logs at any level, in
//!   `Debug`/`Display` of credentials and errors, in condition messages or Events;
//! - minted tokens live at most 15 minutes, and every way to ask for longer is refused;
//! - TLS verification is on by default; the opt-out is explicit, off by default and logged;
//! - the slurmrestd endpoint cannot make the operator a confused deputy: redirects are not
//!   followed, a foreign body never comes back in an error, plain http must be allowed;
//! - a SlurmCluster reads Secrets only from the credentials namespace, marked ones only;
//! - the operator's RBAC never writes Secrets.
//!
//! Every test in this binary runs under ONE global subscriber at TRACE for every crate
//! (dependencies included, `log` records too) writing into a buffer; each test scans it for its own
//! secrets in every encoding a log line could carry them (raw, hex, base64, `{:?}` of the bytes).

// Test code: a failed unwrap is a failed test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use clap::{CommandFactory as _, Parser as _};
use secrecy::ExposeSecret as _;
use serde_json::{Value, json};
use slurm_operator::cli::{Cli, Command as CliCommand};
use slurm_operator::controller::cluster::{self, config};
use slurm_operator::controller::context::Context;
use slurm_operator::crd::{FINALIZER, SlurmCluster};
use slurm_operator::error_chain::Chain;
use slurm_operator::metrics::Metrics;
use slurm_operator::slurm::auth::{
    AuthError, DEFAULT_TOKEN_LIFETIME, MAX_TOKEN_LIFETIME, MIN_TOKEN_LIFETIME,
};
use slurm_operator::slurm::{
    ClientConfig, Credentials, RetryPolicy, SlurmClient, SlurmError, TlsOptions,
};
use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::prelude::*;

/// The upper bound the issue sets on a minted token's life.
const FIFTEEN_MINUTES: u64 = 15 * 60;

// --- capturing every log line -------------------------------------------------------------------

/// The bytes every test of this binary logged, at TRACE, from every crate.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

struct CaptureWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for CaptureWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Capture {
    type Writer = CaptureWriter;
    fn make_writer(&'a self) -> CaptureWriter {
        CaptureWriter(self.0.clone())
    }
}

impl Capture {
    fn bytes(&self) -> Vec<u8> {
        self.0.lock().unwrap().clone()
    }
}

/// Install (once) the global subscriber: everything at TRACE, spans with their fields on open
/// and close, in the text format and the JSON format the operator offers (`--log-format`).
/// `try_init` also installs the `log` bridge, which is how rustls' and reqwest's records arrive.
fn capture() -> &'static Capture {
    static CAPTURE: OnceLock<Capture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let capture = Capture::default();
        tracing_subscriber::registry()
            .with(tracing_subscriber::filter::LevelFilter::TRACE)
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(false)
                    .with_span_events(FmtSpan::FULL)
                    .with_writer(capture.clone()),
            )
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_span_events(FmtSpan::FULL)
                    .with_writer(capture.clone()),
            )
            .try_init()
            .expect("the only subscriber of this test binary");
        capture
    })
}

/// One secret, with every form in which it could appear in text.
struct Secret {
    what: String,
    forms: Vec<(&'static str, Vec<u8>)>,
}

impl Secret {
    fn new(what: impl Into<String>, bytes: &[u8]) -> Self {
        assert!(
            bytes.len() >= 16,
            "too short to search for without false hits"
        );
        let mut forms = vec![
            ("raw", bytes.to_vec()),
            ("hex", hex(bytes).into_bytes()),
            ("HEX", hex(bytes).to_uppercase().into_bytes()),
            ("base64", STANDARD.encode(bytes).into_bytes()),
            (
                "base64 (no padding)",
                STANDARD_NO_PAD.encode(bytes).into_bytes(),
            ),
            ("base64url", URL_SAFE.encode(bytes).into_bytes()),
            (
                "base64url (no padding)",
                URL_SAFE_NO_PAD.encode(bytes).into_bytes(),
            ),
            // `{:?}` of a Vec<u8> or ByteString, without the brackets.
            (
                "Debug of the bytes",
                format!("{bytes:?}")
                    .trim_matches(['[', ']'])
                    .as_bytes()
                    .to_vec(),
            ),
        ];
        // A JWT's signature alone is what makes it usable; look for it on its own too.
        if let Ok(text) = std::str::from_utf8(bytes)
            && let [_, _, signature] = text.split('.').collect::<Vec<_>>()[..]
        {
            forms.push(("JWT signature", signature.as_bytes().to_vec()));
        }
        Self {
            what: what.into(),
            forms,
        }
    }

    fn token(what: impl Into<String>, token: &str) -> Self {
        Self::new(what, token.as_bytes())
    }

    /// Where (which form) this secret occurs in `haystack`, if it does.
    fn found_in(&self, haystack: &[u8]) -> Option<&'static str> {
        self.forms
            .iter()
            .find(|(_, needle)| contains(haystack, needle))
            .map(|(form, _)| *form)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    let Some((&first, _)) = needle.split_first() else {
        return false;
    };
    haystack
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == first)
        .any(|(at, _)| haystack[at..].starts_with(needle))
}

#[track_caller]
fn assert_no_secret(where_: &str, text: &[u8], secrets: &[Secret]) {
    for secret in secrets {
        if let Some(form) = secret.found_in(text) {
            let (needle, at) = secret
                .forms
                .iter()
                .find(|(f, _)| *f == form)
                .map(|(_, n)| (n, text.windows(n.len()).position(|w| w == n.as_slice())))
                .unwrap();
            let at = at.unwrap_or_default();
            let context = String::from_utf8_lossy(
                &text[at.saturating_sub(300)..(at + needle.len() + 100).min(text.len())],
            )
            .into_owned();
            panic!(
                "{} ({form}) found in {where_}:\n...{context}...",
                secret.what
            );
        }
    }
}

/// Assert none of `secrets` is in the captured logs so far (of every test of this binary).
#[track_caller]
fn assert_not_logged(secrets: &[Secret]) {
    assert_no_secret("the captured logs", &capture().bytes(), secrets);
}

/// Random bytes (UUIDv4s), for keys and tokens that must be recognisable when they leak.
fn random_bytes(len: usize) -> Vec<u8> {
    std::iter::repeat_with(|| uuid::Uuid::new_v4().into_bytes())
        .flatten()
        .take(len)
        .collect()
}

#[test]
fn the_scanner_finds_every_encoding() {
    let key = random_bytes(32);
    let secret = Secret::new("key", &key);
    let texts: Vec<(&str, Vec<u8>)> = vec![
        ("raw", [b"x=".as_slice(), &key, b"\n"].concat()),
        ("hex", format!("key={}", hex(&key)).into_bytes()),
        (
            "base64",
            format!("data: {{k: {}}}", STANDARD.encode(&key)).into_bytes(),
        ),
        (
            "base64url",
            format!("\"{}\"", URL_SAFE_NO_PAD.encode(&key)).into_bytes(),
        ),
        (
            "Debug of the bytes",
            format!("ByteString({key:?})").into_bytes(),
        ),
    ];
    for (what, text) in texts {
        assert!(secret.found_in(&text).is_some(), "{what} not found");
    }
    let token = Secret::token(
        "token",
        "aaaaaaaaaaaa.bbbbbbbbbbbbbbbb.cccccccccccccccccccc",
    );
    assert_eq!(
        token.found_in(b"sig=cccccccccccccccccccc"),
        Some("JWT signature")
    );
    assert_eq!(
        secret.found_in(b"nothing to see here, nothing at all"),
        None
    );
}

/// The subscriber really sees TRACE records of our dependencies, through `tracing` and `log`.
/// Without this, "nothing secret in the logs" could just mean "no logs".
#[tokio::test]
async fn the_capture_sees_trace_records_of_dependencies() {
    let slurm = require_slurm!();
    let _ = capture();
    let ours = common::tls::pki();
    let url = common::tls::tls_proxy(&ours, &slurm.url).await;
    let config = ClientConfig::new(&url)
        .unwrap()
        .allow_plaintext(true)
        .with_tls(TlsOptions {
            ca_pem: Some(ours.ca_pem.into_bytes()),
            insecure_skip_verify: false,
        });
    SlurmClient::new(config, slurm.credentials())
        .unwrap()
        .ping()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&capture().bytes()).into_owned();
    for (what, needle) in [
        ("our own debug span", "slurmrestd answered"),
        ("a TRACE record", " TRACE "),
        ("rustls, through the log bridge", "rustls::"),
        ("hyper-util's connection pool", "hyper_util::client"),
    ] {
        assert!(
            text.contains(needle),
            "no {what} ({needle:?}) in the capture"
        );
    }
}

// --- the slurmrestd client: minted and ready tokens, good and bad ---------------------------------

/// A token signed with `key` whose life ended 10 minutes ago.
fn expired_token(key: &[u8], user: &str) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({"iat": now - 1200, "nbf": now - 1200, "exp": now - 600, "sun": user}),
        &jsonwebtoken::EncodingKey::from_secret(key),
    )
    .unwrap()
}

/// Everything a caller can print of a client call's result.
fn printed<T: std::fmt::Debug>(result: &Result<T, SlurmError>) -> String {
    match result {
        Ok(value) => format!("{value:?}"),
        Err(error) => format!("{error} | {error:?} | {}", Chain(error)),
    }
}

#[tokio::test]
async fn client_calls_keep_keys_and_tokens_out_of_logs_and_errors() {
    let slurm = require_slurm!();
    let _ = capture();
    let key = slurm.key();
    let wrong_key = random_bytes(32);
    let minted =
        Arc::new(Credentials::minted(key.clone(), &slurm.user, DEFAULT_TOKEN_LIFETIME).unwrap());
    let client = SlurmClient::new(slurm.config(), minted.clone()).unwrap();
    let mut shown = Vec::new();

    // Successful calls with minted tokens: diag (checks the token), ping, nodes, partitions.
    let info = client.cluster_info().await;
    assert_eq!(info.as_ref().unwrap().cluster_name, slurm.cluster_name);
    shown.push(printed(&info));
    shown.push(printed(&client.ping().await));
    shown.push(printed(&client.nodes(None).await));
    shown.push(printed(&client.partitions().await));
    // Reused until 80 % of its life, so this is the token the calls above sent.
    let minted_token = minted
        .token_at(SystemTime::now())
        .unwrap()
        .expose_secret()
        .to_owned();

    // A ready token (the Secret's `token` case), accepted.
    let ready_token = Credentials::minted(key.clone(), &slurm.user, DEFAULT_TOKEN_LIFETIME)
        .unwrap()
        .token_at(SystemTime::now())
        .unwrap()
        .expose_secret()
        .to_owned();
    let ready = Arc::new(Credentials::token(&ready_token, Some(slurm.user.clone())).unwrap());
    let result = SlurmClient::new(slurm.config(), ready.clone())
        .unwrap()
        .cluster_info()
        .await;
    assert!(result.is_ok(), "{}", printed(&result));
    shown.push(printed(&result));

    // Refused before sending: a token past its exp claim (signed with the right key).
    let expired = expired_token(&key, &slurm.user);
    let credentials = Arc::new(Credentials::token(&expired, None).unwrap());
    let result = SlurmClient::new(slurm.config(), credentials.clone())
        .unwrap()
        .cluster_info()
        .await;
    assert!(
        matches!(
            result,
            Err(SlurmError::Credentials(AuthError::TokenExpired { .. }))
        ),
        "{}",
        printed(&result)
    );
    shown.push(printed(&result));
    shown.push(format!("{credentials:?}"));

    // Rejected by slurmrestd (511): a token from another key, and the running client's key
    // rotated to a wrong one.
    let foreign = Credentials::minted(wrong_key.clone(), &slurm.user, DEFAULT_TOKEN_LIFETIME)
        .unwrap()
        .token_at(SystemTime::now())
        .unwrap()
        .expose_secret()
        .to_owned();
    {
        let credentials = Arc::new(Credentials::token(&foreign, None).unwrap());
        let result = SlurmClient::new(slurm.config(), credentials.clone())
            .unwrap()
            .cluster_info()
            .await;
        assert!(
            matches!(result, Err(SlurmError::Unauthorized { status: 511, .. })),
            "{}",
            printed(&result)
        );
        shown.push(printed(&result));
        shown.push(format!("{credentials:?}"));
    }
    client.set_credentials(Arc::new(
        Credentials::minted(wrong_key.clone(), &slurm.user, DEFAULT_TOKEN_LIFETIME).unwrap(),
    ));
    let result = client.cluster_info().await;
    assert!(
        matches!(result, Err(SlurmError::Unauthorized { status: 511, .. })),
        "{}",
        printed(&result)
    );
    shown.push(printed(&result));

    // Credentials that cannot be built say why without echoing what was given.
    let bad_token = format!("{}\u{1}", URL_SAFE_NO_PAD.encode(random_bytes(24)));
    let error = Credentials::token(&bad_token, None).unwrap_err();
    shown.push(format!("{error} {error:?}"));
    let error =
        Credentials::minted(key.clone(), &slurm.user, Duration::from_secs(3600)).unwrap_err();
    shown.push(format!("{error} {error:?}"));
    shown.push(format!(
        "{minted:?} {ready:?} {client:?} {:?}",
        slurm.config()
    ));

    let secrets = [
        Secret::new("the cluster's JWT key", &key),
        Secret::new("a wrong JWT key", &wrong_key),
        Secret::token("a minted token", &minted_token),
        Secret::token("a ready token", &ready_token),
        Secret::token("an expired token", &expired),
        Secret::token("a token from another key", &foreign),
        Secret::token("a token with a control character", &bad_token),
    ];
    for text in &shown {
        assert_no_secret(
            &format!("printed output {text:?}"),
            text.as_bytes(),
            &secrets,
        );
    }
    assert_not_logged(&secrets);
}

// --- the SlurmCluster controller, against an API server over real HTTP ---------------------------------

const NS: &str = "team-a";
/// The operator's own bearer token for the Kubernetes API: secret material too.
const API_TOKEN: &str = "sa-token-6a1f0e1c9d4b4e7f8a2b3c4d5e6f7a8b";

/// One request the fake API server received.
#[derive(Debug, Clone)]
struct Received {
    method: String,
    path: String,
    body: Vec<u8>,
}

/// A stand-in for the Kubernetes API server on a loopback port, so that the operator's kube
/// client runs its whole stack (hyper, its tower layers, bearer auth) under the TRACE capture.
/// Serves Secrets from `secrets` (by namespace and name), accepts status applies of the Clusters
/// in `clusters` and Events, answers 404 to anything else, and records every request.
#[derive(Default)]
struct FakeApi {
    secrets: HashMap<(String, String), Value>,
    clusters: Mutex<HashMap<String, Value>>,
    received: Mutex<Vec<Received>>,
}

fn response(status: u16, body: &Value) -> axum::response::Response {
    axum::response::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(axum::body::Body::from(serde_json::to_vec(body).unwrap()))
        .unwrap()
}

fn not_found(path: &str) -> axum::response::Response {
    response(
        404,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("{path} not found"), "reason": "NotFound", "code": 404}),
    )
}

async fn serve(
    axum::extract::State(api): axum::extract::State<Arc<FakeApi>>,
    request: axum::extract::Request,
) -> axum::response::Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default()
        .to_vec();
    let path = parts.uri.path().to_owned();
    let method = parts.method.as_str().to_owned();
    api.received.lock().unwrap().push(Received {
        method: method.clone(),
        path: path.clone(),
        body: body.clone(),
    });
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (method.as_str(), segments.as_slice()) {
        ("GET", ["api", "v1", "namespaces", ns, "secrets", name]) => {
            match api.secrets.get(&((*ns).to_owned(), (*name).to_owned())) {
                Some(secret) => response(200, secret),
                None => not_found(&path),
            }
        }
        (
            "PATCH",
            [
                "apis",
                "slurm.rs",
                "v1alpha1",
                "slurmclusters",
                name,
                "status",
            ],
        ) => {
            let patch: Value = serde_json::from_slice(&body).unwrap_or_default();
            let mut clusters = api.clusters.lock().unwrap();
            match clusters.get_mut(*name) {
                Some(cluster) => {
                    cluster["status"] = patch["status"].clone();
                    response(200, cluster)
                }
                None => not_found(&path),
            }
        }
        ("POST" | "PATCH", ["apis", "events.k8s.io", "v1", "namespaces", ..]) => {
            let event: Value = serde_json::from_slice(&body).unwrap_or_default();
            response(if method == "POST" { 201 } else { 200 }, &event)
        }
        _ => not_found(&path),
    }
}

impl FakeApi {
    /// Serve on a loopback port; returns a kube client for it, authenticating with [`API_TOKEN`].
    async fn start(self: &Arc<Self>) -> kube::Client {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new().fallback(serve).with_state(self.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let mut config = kube::Config::new(url.parse().unwrap());
        config.auth_info.token = Some(API_TOKEN.to_owned().into());
        kube::Client::try_from(config).unwrap()
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

fn secret(namespace: &str, name: &str, data: &[(&str, &[u8])]) -> ((String, String), Value) {
    let data: BTreeMap<&str, String> = data.iter().map(|(k, v)| (*k, STANDARD.encode(v))).collect();
    (
        (namespace.to_owned(), name.to_owned()),
        json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
               "metadata": {"name": name, "namespace": namespace,
                            "labels": {"slurm.rs/credentials": "true"}},
               "data": data}),
    )
}

fn cluster_object(name: &str, endpoint: &str, auth: Value) -> Value {
    json!({
        "apiVersion": "slurm.rs/v1alpha1",
        "kind": "SlurmCluster",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "generation": 1,
                     "resourceVersion": "1", "finalizers": [FINALIZER]},
        "spec": {"endpoint": endpoint, "allowInsecureHttp": endpoint.starts_with("http://"),
                 "pollInterval": "1s", "auth": auth},
    })
}

/// The SlurmCluster controller's whole path from a Secret to a status, for good and bad credentials
/// and bad Secrets: no key or token in the logs (kube and hyper included), in the errors and what
/// `error_policy` logs, nor in anything written to the API server (status conditions, Events).
/// Every Secret is read from the credentials namespace, whatever the reference says.
#[tokio::test]
async fn the_cluster_controller_keeps_secrets_out_of_logs_status_and_events() {
    let slurm = require_slurm!();
    let _ = capture();
    let key = slurm.key();
    let wrong_key = random_bytes(32);
    let decoy_key = random_bytes(32);
    let other_value = random_bytes(32);
    let not_utf8 = [random_bytes(24), vec![0xff, 0xfe]].concat();
    let good_token = Credentials::minted(key.clone(), &slurm.user, DEFAULT_TOKEN_LIFETIME)
        .unwrap()
        .token_at(SystemTime::now())
        .unwrap()
        .expose_secret()
        .to_owned();
    let expired = expired_token(&key, &slurm.user);
    let control_char = format!("{}\u{1}x", URL_SAFE_NO_PAD.encode(random_bytes(24)));

    let api = Arc::new(FakeApi {
        secrets: HashMap::from([
            secret(NS, "jwt-good", &[("jwt_hs256.key", &key)]),
            secret(NS, "jwt-wrong", &[("jwt_hs256.key", &wrong_key)]),
            secret(NS, "tok-good", &[("token", good_token.as_bytes())]),
            secret(NS, "tok-expired", &[("token", expired.as_bytes())]),
            secret(NS, "tok-control", &[("token", control_char.as_bytes())]),
            secret(NS, "tok-binary", &[("token", &not_utf8)]),
            secret(NS, "jwt-elsewhere", &[("other.key", &other_value)]),
            // Same name in another namespace, with a key that would fail: reading it would show.
            secret("kube-system", "jwt-good", &[("jwt_hs256.key", &decoy_key)]),
        ]),
        ..FakeApi::default()
    });
    let url = slurm.url.as_str();
    let user = slurm.user.as_str();
    let jwt = |name: &str| json!({"jwt": {"keySecretRef": {"name": name}, "user": user}});
    let token = |name: &str| json!({"tokenSecretRef": {"name": name}});
    // (SlurmCluster, auth, the Ready condition's reason it must end with)
    let cases = [
        ("good-key", jwt("jwt-good"), "Connected"),
        ("wrong-key", jwt("jwt-wrong"), "Unauthorized"),
        ("good-token", token("tok-good"), "Connected"),
        ("expired-token", token("tok-expired"), "InvalidCredentials"),
        ("control-char-token", token("tok-control"), "InvalidToken"),
        ("binary-token", token("tok-binary"), "TokenNotUTF8"),
        ("missing-key", jwt("jwt-elsewhere"), "SecretKeyMissing"),
        (
            "namespace-in-ref",
            json!({"jwt": {"keySecretRef": {"name": "jwt-good", "namespace": "kube-system"},
                           "user": user}}),
            "Connected",
        ),
        (
            "path-as-name",
            jwt("../../kube-system/secrets/jwt-good"),
            "InvalidObjectName",
        ),
    ];
    for (name, auth, _) in &cases {
        api.clusters
            .lock()
            .unwrap()
            .insert((*name).to_owned(), cluster_object(name, url, auth.clone()));
    }
    let mut ctx = Context::new(api.start().await, Metrics::new());
    ctx.credentials_namespace = NS.to_owned();
    let ctx = Arc::new(ctx);

    let mut shown = Vec::new();
    for (name, auth, _) in &cases {
        let object: SlurmCluster =
            serde_json::from_value(cluster_object(name, url, auth.clone())).unwrap();
        let object = Arc::new(object);
        match cluster::reconcile(object.clone(), ctx.clone()).await {
            Ok(action) => shown.push(format!("{action:?}")),
            Err(error) => {
                shown.push(format!("{error} | {error:?} | {}", Chain(&error)));
                let action = cluster::error_policy(object, &error, ctx.clone());
                shown.push(format!("{action:?}"));
            }
        }
    }
    // Stop the pollers of the working Clusters.
    for (name, _, _) in &cases {
        ctx.clusters
            .remove(&kube::runtime::reflector::ObjectRef::new(name));
    }

    let received = api.received();
    // Each case ended where it should: the scenarios really ran their paths.
    for (name, _, reason) in &cases {
        let status = received
            .iter()
            .rev()
            .find(|r| {
                r.method == "PATCH" && r.path.ends_with(&format!("/slurmclusters/{name}/status"))
            })
            .map(|r| serde_json::from_slice::<Value>(&r.body).unwrap())
            .unwrap_or_else(|| panic!("no status for {name}"));
        let ready = status["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap()
            .clone();
        assert_eq!(ready["reason"], *reason, "{name}: {ready}");
    }
    // Secrets: read only in the credentials namespace, one name per path, never written.
    let secret_requests: Vec<&Received> = received
        .iter()
        .filter(|r| r.path.contains("/secrets"))
        .collect();
    assert!(!secret_requests.is_empty());
    for request in &secret_requests {
        assert_eq!(request.method, "GET", "{request:?}");
        let name = request
            .path
            .strip_prefix(&format!("/api/v1/namespaces/{NS}/secrets/"))
            .unwrap_or_else(|| panic!("a Secret read outside {NS}: {}", request.path));
        assert!(!name.is_empty() && !name.contains('/'), "{}", request.path);
    }
    assert!(
        received.iter().all(|r| !r.path.contains("kube-system")),
        "{received:#?}"
    );

    let secrets = [
        Secret::new("the cluster's JWT key", &key),
        Secret::new("a wrong JWT key", &wrong_key),
        Secret::new("the decoy key in kube-system", &decoy_key),
        Secret::new("another value in the key Secret", &other_value),
        Secret::new("a non-UTF-8 token", &not_utf8),
        Secret::token("a ready token", &good_token),
        Secret::token("an expired token", &expired),
        Secret::token("a token with a control character", &control_char),
        Secret::token("the operator's Kubernetes API token", API_TOKEN),
    ];
    for request in received.iter().filter(|r| r.method != "GET") {
        assert_no_secret(
            &format!("{} {} (status or Event)", request.method, request.path),
            &request.body,
            &secrets,
        );
    }
    for text in &shown {
        assert_no_secret(
            &format!("printed output {text:?}"),
            text.as_bytes(),
            &secrets,
        );
    }
    assert_not_logged(&secrets);
    let logs = String::from_utf8_lossy(&capture().bytes()).into_owned();
    assert!(
        logs.contains("kube_client") && logs.contains("SlurmCluster reconcile failed"),
        "the capture misses the kube client's or the controller's records"
    );
}

// --- the command line ---------------------------------------------------------------------------

/// Run the operator binary with every log level on.
fn operator(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_slurm-operator"));
    command
        .args(args)
        .env("RUST_LOG", "trace")
        .env_remove("SLURM_REST_URL")
        .env_remove("SLURM_JWT_KEY")
        .env_remove("SLURM_USER")
        .env_remove("SLURM_JWT");
    for (k, v) in env {
        command.env(k, v);
    }
    command.output().unwrap()
}

fn all_output(out: &Output) -> Vec<u8> {
    [out.stdout.as_slice(), out.stderr.as_slice()].concat()
}

fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// `slurm-operator check` with `RUST_LOG=trace`: with a key file, a token on the command line, in
/// a file, in the environment; good and bad. Neither stdout nor stderr shows the secret.
#[test]
fn check_never_prints_keys_or_tokens() {
    let slurm = require_slurm!();
    let dir = tempfile::tempdir().unwrap();
    let key = slurm.key();
    let key_file = slurm.key_path.to_str().unwrap();
    let good = Credentials::minted(key.clone(), &slurm.user, DEFAULT_TOKEN_LIFETIME)
        .unwrap()
        .token_at(SystemTime::now())
        .unwrap()
        .expose_secret()
        .to_owned();
    // Shaped like a JWT (which starts with `eyJ`, the encoding of `{"`): base64url may start with
    // `-`, and clap would take such a value for an option (1 run in 64 failed so).
    let garbage = format!("eyJ{}", URL_SAFE_NO_PAD.encode(random_bytes(48)));
    let expired = expired_token(&key, &slurm.user);
    let expired_file = write_file(dir.path(), "expired", expired.as_bytes());
    let expired_file = expired_file.to_str().unwrap();
    let url = slurm.url.as_str();
    let user = slurm.user.as_str();

    let runs: Vec<(&str, Output, i32)> = vec![
        (
            "--jwt-key",
            operator(
                &["check", "--url", url, "--jwt-key", key_file, "--user", user],
                &[],
            ),
            0,
        ),
        (
            "--token (good)",
            operator(&["check", "--url", url, "--token", &good], &[]),
            0,
        ),
        (
            "SLURM_JWT (good)",
            operator(&["check", "--url", url], &[("SLURM_JWT", &good)]),
            0,
        ),
        (
            "--token (garbage)",
            operator(&["check", "--url", url, "--token", &garbage], &[]),
            5,
        ),
        (
            "--token-file (expired)",
            operator(&["check", "--url", url, "--token-file", expired_file], &[]),
            5,
        ),
        (
            "--token with --token-file (usage error)",
            operator(
                &[
                    "check",
                    "--url",
                    url,
                    "--token",
                    &garbage,
                    "--token-file",
                    expired_file,
                ],
                &[],
            ),
            2,
        ),
        (
            "--help with SLURM_JWT set",
            operator(&["check", "--help"], &[("SLURM_JWT", &garbage)]),
            0,
        ),
    ];
    let secrets = [
        Secret::new("the cluster's JWT key", &key),
        Secret::token("a good token", &good),
        Secret::token("a garbage token", &garbage),
        Secret::token("an expired token", &expired),
    ];
    for (what, out, code) in &runs {
        assert_eq!(
            out.status.code(),
            Some(*code),
            "{what}: {}",
            String::from_utf8_lossy(&all_output(out))
        );
        assert_no_secret(what, &all_output(out), &secrets);
    }
    // RUST_LOG=trace took effect: the binary logged the requests it made.
    assert!(
        String::from_utf8_lossy(&runs[0].1.stderr).contains("slurmrestd answered"),
        "{}",
        String::from_utf8_lossy(&runs[0].1.stderr)
    );
}

/// Proxy variables in the operator's environment (a chart's `extraEnv`, a platform that injects
/// a cluster-wide proxy) never route requests to slurmrestd: with plain http the proxy would
/// read every token and script. The token goes to the configured endpoint only.
#[test]
fn proxy_variables_never_carry_requests_to_slurmrestd() {
    let slurm = require_slurm!();
    let proxy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    proxy.set_nonblocking(true).unwrap();
    let proxy_url = format!("http://{}", proxy.local_addr().unwrap());
    let variables = [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ];
    let mut env: Vec<(&str, &str)> = variables.iter().map(|v| (*v, proxy_url.as_str())).collect();
    // Nothing is exempted from the proxy, not even loopback.
    env.extend([("NO_PROXY", ""), ("no_proxy", "")]);
    let key_file = slurm.key_path.to_str().unwrap();
    let out = operator(
        &[
            "check",
            "--url",
            slurm.url.as_str(),
            "--jwt-key",
            key_file,
            "--user",
            slurm.user.as_str(),
        ],
        &env,
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&all_output(&out))
    );
    // A connection made to the listener waits in its backlog: none did.
    match proxy.accept() {
        Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the proxy was contacted: {other:?}"),
    }
}

/// What the SlurmCluster controller holds between reading the Secrets and building the connection
/// prints the objects' names, never their data (k8s-openapi's `Secret` would print the bytes).
#[test]
fn the_read_secrets_print_without_their_data() {
    let (key, ca) = (random_bytes(32), random_bytes(32));
    let read = |namespace, name, data: &[(&str, &[u8])]| {
        serde_json::from_value(secret(namespace, name, data).1).unwrap()
    };
    let sources = config::Sources {
        auth: Some(read(NS, "jwt", &[("jwt_hs256.key", &key)])),
        ca_secret: Some(read(NS, "ca", &[("ca.crt", &ca)])),
        ca_config_map: None,
    };
    let printed = format!("{sources:?} {sources:#?}");
    assert!(
        printed.contains("jwt") && printed.contains("ca.crt"),
        "{printed}"
    );
    assert_no_secret(
        "Debug of the read Secrets",
        printed.as_bytes(),
        &[
            Secret::new("the key", &key),
            Secret::new("the CA bundle", &ca),
        ],
    );
}

/// The parsed command line is `Debug` (clap derives it): the token must print redacted.
#[test]
fn the_parsed_command_line_does_not_print_the_token() {
    let token = URL_SAFE_NO_PAD.encode(random_bytes(48));
    // `--token=<token>`: a random token may start with `-`, which clap would read as a flag.
    let cli = Cli::try_parse_from([
        "slurm-operator",
        "check",
        "--url",
        "http://h:6820",
        &format!("--token={token}"),
    ])
    .unwrap();
    let CliCommand::Check(args) = &cli.command else {
        panic!("parsed as {cli:?}");
    };
    assert_eq!(
        args.connect.token.as_ref().map(|t| t.expose_secret()),
        Some(token.as_str())
    );
    let printed = format!("{cli:?} {cli:#?}");
    assert_no_secret(
        "Debug of the parsed command line",
        printed.as_bytes(),
        &[Secret::token("the token", &token)],
    );
}

/// A SlurmCluster manifest with a token Secret, for `job run`.
fn job_run_manifests(dir: &Path, endpoint: &str, secret_yaml: &str) -> (PathBuf, PathBuf) {
    let cluster = write_file(
        dir,
        "cluster.yaml",
        format!(
            "{secret_yaml}\n---\napiVersion: slurm.rs/v1alpha1\nkind: SlurmCluster\nmetadata: {{name: c}}\n\
             spec:\n  endpoint: {endpoint}\n  allowInsecureHttp: true\n  auth: {{tokenSecretRef: {{name: tok}}}}\n"
        )
        .as_bytes(),
    );
    let job = write_file(
        dir,
        "job.yaml",
        b"apiVersion: slurm.rs/v1alpha1\nkind: SlurmJob\nmetadata: {name: j}\n\
          spec:\n  clusterName: c\n  script: |\n    #!/bin/sh\n    true\n",
    );
    (cluster, job)
}

/// `job run` failing on its SlurmCluster's Secret, and on an endpoint nothing listens on (no Slurm
/// is contacted, no job submitted): what it prints never holds the token.
#[test]
fn job_run_never_prints_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let token = URL_SAFE_NO_PAD.encode(random_bytes(48));
    let encoded = STANDARD.encode(&token);
    let control = format!("{token}\u{1}");
    let cases = [
        // A usable token, an unreachable slurmrestd (port 9, discard: nothing listens).
        ("unreachable", format!("data: {{token: {encoded}}}"), 3),
        (
            "control character",
            format!("data: {{token: {}}}", STANDARD.encode(&control)),
            2,
        ),
        // Malformed Secrets: parse errors must not quote the value.
        ("data not a map", format!("data: {encoded}"), 2),
        (
            "value not base64",
            format!("data: {{token: \"{token}!\"}}"),
            2,
        ),
        ("stringData not a map", format!("stringData: {token}"), 2),
    ];
    for (what, data, code) in cases {
        let secret = format!(
            "apiVersion: v1\nkind: Secret\n\
             metadata: {{name: tok, labels: {{slurm.rs/credentials: \"true\"}}}}\n{data}"
        );
        let (cluster, job) = job_run_manifests(dir.path(), "http://127.0.0.1:9", &secret);
        let out = operator(
            &[
                "job",
                "run",
                "--cluster",
                cluster.to_str().unwrap(),
                "-f",
                job.to_str().unwrap(),
            ],
            &[],
        );
        let all = all_output(&out);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{what}: {}",
            String::from_utf8_lossy(&all)
        );
        assert_no_secret(what, &all, &[Secret::token("the token", &token)]);
    }
}

// --- minted token lifetime ----------------------------------------------------------------------

/// The claims of a JWT, without checking anything.
fn claims(token: &str) -> Value {
    let payload = token.split('.').nth(1).unwrap();
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap()
}

fn lifetime_of(token: &str) -> u64 {
    let claims = claims(token);
    let (iat, nbf, exp) = (
        claims["iat"].as_u64().unwrap(),
        claims["nbf"].as_u64().unwrap(),
        claims["exp"].as_u64().unwrap(),
    );
    assert!(nbf <= iat, "{claims}");
    exp - iat
}

#[test]
fn minted_tokens_live_at_most_15_minutes_and_longer_is_refused() {
    assert!(MAX_TOKEN_LIFETIME <= Duration::from_secs(FIFTEEN_MINUTES));
    assert!(
        MIN_TOKEN_LIFETIME <= DEFAULT_TOKEN_LIFETIME
            && DEFAULT_TOKEN_LIFETIME <= MAX_TOKEN_LIFETIME
    );
    let key = random_bytes(32);
    for lifetime in [
        MIN_TOKEN_LIFETIME,
        DEFAULT_TOKEN_LIFETIME,
        MAX_TOKEN_LIFETIME,
    ] {
        let token = Credentials::minted(key.clone(), "slurm", lifetime)
            .unwrap()
            .token_at(SystemTime::now())
            .unwrap();
        let lived = lifetime_of(token.expose_secret());
        assert_eq!(lived, lifetime.as_secs());
        assert!(lived <= FIFTEEN_MINUTES);
    }
    for too_long in [FIFTEEN_MINUTES + 1, 3600, 86_400 * 365] {
        assert!(matches!(
            Credentials::minted(key.clone(), "slurm", Duration::from_secs(too_long)),
            Err(AuthError::LifetimeOutOfRange { .. })
        ));
    }
}

/// A SlurmCluster as a user writes it: without `lifetime` it gets 15 minutes, and a longer one is
/// refused by the operator itself (not only by the CRD's rule).
#[test]
fn a_clusters_token_lifetime_defaults_to_15_minutes_and_cannot_be_longer() {
    let key = random_bytes(32);
    let spec = |lifetime: Option<&str>| {
        let mut jwt = json!({"keySecretRef": {"name": "jwt"}});
        if let Some(lifetime) = lifetime {
            jwt["lifetime"] = json!(lifetime);
        }
        serde_json::from_value::<slurm_operator::crd::SlurmClusterSpec>(
            json!({"endpoint": "http://slurmrestd:6820", "allowInsecureHttp": true,
                   "auth": {"jwt": jwt}}),
        )
        .unwrap()
    };
    let sources = config::Sources {
        auth: Some(
            serde_json::from_value(secret(NS, "jwt", &[("jwt_hs256.key", &key)]).1).unwrap(),
        ),
        ..Default::default()
    };
    for (lifetime, want) in [
        (None, FIFTEEN_MINUTES),
        (Some("30s"), 30),
        (Some("15m"), FIFTEEN_MINUTES),
    ] {
        let validated = config::plan(&spec(lifetime))
            .unwrap()
            .build(&sources)
            .unwrap();
        let token = validated.credentials.token_at(SystemTime::now()).unwrap();
        assert_eq!(lifetime_of(token.expose_secret()), want, "{lifetime:?}");
    }
    for lifetime in ["15m1s", "16m", "1h", "24h"] {
        let error = config::plan(&spec(Some(lifetime))).unwrap_err();
        assert_eq!(
            error.reason(),
            "TokenLifetimeOutOfRange",
            "{lifetime}: {error}"
        );
    }
}

/// The CRD as committed (what `helm install` and `kubectl apply` send): `lifetime` defaults to
/// 15m and its rule refuses anything longer, evaluated with kube's CEL engine.
#[test]
fn the_committed_crd_refuses_lifetimes_over_15_minutes() {
    let schema = committed_schema("slurmclusters.slurm.rs");
    let lifetime = &schema["properties"]["spec"]["properties"]["auth"]["properties"]["jwt"]["properties"]
        ["lifetime"];
    assert_eq!(lifetime["default"], "15m", "{lifetime}");
    let object = |lifetime: &str| {
        json!({"apiVersion": "slurm.rs/v1alpha1", "kind": "SlurmCluster",
               "metadata": {"name": "c"},
               "spec": {"endpoint": "http://slurmrestd:6820", "allowInsecureHttp": true,
                        "auth": {"jwt": {"keySecretRef": {"name": "jwt"}, "lifetime": lifetime}}}})
    };
    let validator = kube::core::cel::Validator::new();
    for ok in ["30s", "14m59s", "15m"] {
        let result = validator.validate(&schema, &object(ok), None);
        assert!(result.is_ok(), "{ok}: {result:?}");
    }
    for too_long in ["15m1s", "16m", "1h"] {
        assert!(
            validator
                .validate(&schema, &object(too_long), None)
                .is_err(),
            "{too_long} accepted"
        );
    }
}

/// `check --token-lifetime` longer than 15 minutes fails before any request (the URL would only
/// give "unreachable", exit 3).
#[test]
fn the_cli_refuses_token_lifetimes_over_15_minutes() {
    let dir = tempfile::tempdir().unwrap();
    let key = write_file(dir.path(), "key", &random_bytes(32));
    let key = key.to_str().unwrap();
    for lifetime in ["15m1s", "16m", "1h"] {
        let out = operator(
            &[
                "check",
                "--url",
                "http://127.0.0.1:9",
                "--jwt-key",
                key,
                "--user",
                "slurm",
                "--token-lifetime",
                lifetime,
            ],
            &[],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        // A bad argument (README: exit 2), not a refused token.
        assert_eq!(out.status.code(), Some(2), "{lifetime}: {stderr}");
        assert!(
            stderr.contains("outside the allowed range"),
            "{lifetime}: {stderr}"
        );
    }
    let cli = Cli::try_parse_from(["slurm-operator", "check", "--url", "http://h:6820"]).unwrap();
    let CliCommand::Check(args) = cli.command else {
        panic!("not check");
    };
    assert_eq!(
        args.connect.token_lifetime,
        Duration::from_secs(FIFTEEN_MINUTES)
    );
}

// --- TLS verification ---------------------------------------------------------------------------

/// A client from a default configuration refuses a self-signed certificate; the only way past it
/// is the explicit opt-out, which is off by default, says "insecure" in every name, and logs a
/// warning.
#[tokio::test]
async fn tls_verification_is_on_by_default() {
    let slurm = require_slurm!();
    let _ = capture();
    let url = common::tls::tls_proxy(&common::tls::self_signed(), &slurm.url).await;

    let default = ClientConfig::new(&url).unwrap().allow_plaintext(true);
    assert!(!default.tls.insecure_skip_verify && default.tls.ca_pem.is_none());
    assert!(!TlsOptions::default().insecure_skip_verify);
    let result = SlurmClient::new(default, slurm.credentials())
        .unwrap()
        .cluster_info()
        .await;
    assert!(
        matches!(result, Err(SlurmError::Tls { .. })),
        "{}",
        printed(&result)
    );

    // The server works: only verification stood in the way.
    let insecure = ClientConfig::new(&url)
        .unwrap()
        .allow_plaintext(true)
        .with_retry(RetryPolicy::none())
        .with_tls(TlsOptions {
            ca_pem: None,
            insecure_skip_verify: true,
        });
    let client = SlurmClient::new(insecure, slurm.credentials()).unwrap();
    client.cluster_info().await.unwrap();
    let logs = String::from_utf8_lossy(&capture().bytes()).into_owned();
    assert!(
        logs.lines().any(|l| l.contains(" WARN ")
            && l.contains("TLS certificate verification is DISABLED")
            && l.contains(&url)),
        "no warning about the disabled verification"
    );

    // The command line: off unless `--insecure-skip-tls-verify` is given; without it, exit 4.
    let cli = Cli::try_parse_from(["slurm-operator", "check", "--url", &url]).unwrap();
    let CliCommand::Check(args) = &cli.command else {
        panic!("not check");
    };
    assert!(!args.connect.insecure_skip_tls_verify);
    let command = Cli::command();
    let check = command.find_subcommand("check").unwrap();
    let flag = check
        .get_arguments()
        .find(|a| a.get_id() == "insecure_skip_tls_verify")
        .unwrap();
    assert_eq!(flag.get_long(), Some("insecure-skip-tls-verify"));
    assert!(
        flag.get_env().is_none(),
        "an environment variable could turn it on unseen"
    );
    // The proxy runs on this test's runtime: wait for the process off it.
    let args = [
        "check".to_owned(),
        "--url".to_owned(),
        url.clone(),
        "--jwt-key".to_owned(),
        slurm.key_path.to_str().unwrap().to_owned(),
        "--user".to_owned(),
        slurm.user.clone(),
    ];
    let out =
        tokio::task::spawn_blocking(move || operator(&args.each_ref().map(String::as_str), &[]))
            .await
            .unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The CRD: `insecureSkipVerify` defaults to false, in the committed schema and in Rust.
    let schema = committed_schema("slurmclusters.slurm.rs");
    assert_eq!(
        schema["properties"]["spec"]["properties"]["tls"]["properties"]["insecureSkipVerify"]["default"],
        false
    );
    let tls: slurm_operator::crd::ClusterTls = serde_json::from_value(json!({})).unwrap();
    assert!(!tls.insecure_skip_verify);
}

// --- The endpoint cannot turn the operator into a confused deputy --------------------------------

/// A facade client for `uri` with a ready token and no retries unless asked.
/// A client pinned to v0.0.42, so each call makes exactly the request it names (an unpinned
/// client's first call negotiates with `/ping` first; `deputy_negotiating` is that one).
fn deputy(uri: &str, token: &str, retry: RetryPolicy) -> SlurmClient {
    deputy_with(
        uri,
        token,
        retry,
        Some(slurm_operator::slurm::ApiVersion::V0_0_42),
    )
}

fn deputy_negotiating(uri: &str, token: &str, retry: RetryPolicy) -> SlurmClient {
    deputy_with(uri, token, retry, None)
}

fn deputy_with(
    uri: &str,
    token: &str,
    retry: RetryPolicy,
    version: Option<slurm_operator::slurm::ApiVersion>,
) -> SlurmClient {
    let config = ClientConfig::new(uri)
        .unwrap()
        .allow_plaintext(true)
        .with_api_version(version)
        .with_retry(retry)
        .with_request_timeout(Duration::from_secs(10));
    SlurmClient::new(config, Arc::new(Credentials::token(token, None).unwrap())).unwrap()
}

fn submit_request() -> slurm_operator::slurm::types::SubmitRequest {
    slurm_operator::slurm::types::SubmitRequest {
        script: "#!/bin/sh\ntrue\n".into(),
        working_directory: "/tmp".into(),
        ..Default::default()
    }
}

/// An endpoint answering 3xx to another server: the facade does not follow, so the other server
/// receives no request at all (no token, no job script), and the call fails with `Redirected`,
/// at once (not retried), naming where it was sent without user info and query.
#[tokio::test]
async fn redirects_are_not_followed_and_the_token_stays_home() {
    let _ = capture();
    let elsewhere = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::any())
        .respond_with(
            wiremock::ResponseTemplate::new(200).set_body_json(common::hostile::recorded("diag")),
        )
        .mount(&elsewhere)
        .await;
    let token = hex(&random_bytes(24));
    for status in [301, 302, 303, 307, 308] {
        let endpoint = wiremock::MockServer::start().await;
        let target = format!(
            "{}/slurm/v0.0.42/diag?session=SESSION-{status}#frag",
            elsewhere
                .uri()
                .replacen("http://", "http://admin:PASSWORD@", 1)
        );
        wiremock::Mock::given(wiremock::matchers::any())
            .respond_with(
                wiremock::ResponseTemplate::new(status).insert_header("Location", &target),
            )
            .mount(&endpoint)
            .await;
        // The default retry policy: a redirect must not be tried again.
        let client = deputy(&endpoint.uri(), &token, RetryPolicy::default());
        // Negotiating the version (its `/ping` probe) does not follow one either.
        let negotiating = deputy_negotiating(&endpoint.uri(), &token, RetryPolicy::default());
        let results = [
            ("ping", negotiating.negotiate().await.map(|_| ())),
            ("diag", client.cluster_info().await.map(|_| ())),
            (
                "submit_job",
                client.submit_job(&submit_request()).await.map(|_| ()),
            ),
            ("cancel_job", client.cancel_job(7).await),
        ];
        for (call, result) in results {
            let error = result.expect_err(call);
            assert!(
                matches!(&error, SlurmError::Redirected { status: s, .. } if *s == status),
                "{call} {status}: {error:?}"
            );
            assert_eq!(error.category(), "Redirected");
            assert!(!error.is_transient());
            let text = Chain(&error).to_string();
            let host = elsewhere.uri().trim_start_matches("http://").to_owned();
            assert!(text.contains(&host) && text.contains(call), "{text}");
            assert!(
                ["SESSION", "frag", "PASSWORD"]
                    .iter()
                    .all(|part| !text.contains(part)),
                "{text}"
            );
        }
        let asked = endpoint.received_requests().await.unwrap();
        // One request per call (negotiation stops at its first probe's redirect), none retried.
        assert_eq!(asked.len(), 4, "one request per call, none retried");
        assert!(
            asked
                .iter()
                .all(|r| r.headers.get("x-slurm-user-token").is_some()),
            "the endpoint itself was asked with the token"
        );
        let leaked = elsewhere.received_requests().await.unwrap();
        assert!(
            leaked.is_empty(),
            "HTTP {status}: the redirect target received {} request(s), e.g. {:?}",
            leaked.len(),
            leaked
                .first()
                .map(|r| (&r.method, r.url.as_str(), &r.headers))
        );
    }
    // A redirect without a Location is still one.
    let endpoint = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::any())
        .respond_with(wiremock::ResponseTemplate::new(302))
        .mount(&endpoint)
        .await;
    let error = deputy(&endpoint.uri(), &token, RetryPolicy::none())
        .ping()
        .await
        .unwrap_err();
    assert_eq!(error.category(), "Redirected", "{error}");
    assert_not_logged(&[Secret::token("the ready token", &token)]);
}

/// Whatever an endpoint that is not slurmrestd answers (an internal service a Cluster's
/// endpoint points to), its body does not come back in the error, whose text goes to the
/// Cluster's and SlurmJob's status and Events: an SSRF with a read-back. slurmrestd's own JSON
/// still has its messages used (the recorded "invalid partition" answer). The body's start is in
/// the debug log only.
#[tokio::test]
async fn errors_never_carry_a_foreign_body() {
    let _ = capture();
    let marker = format!("aws_secret_access_key={}", hex(&random_bytes(20)));
    let bodies: Vec<(&str, &str, Vec<u8>)> = vec![
        ("text", "text/plain", format!("{marker}\n").into_bytes()),
        (
            "html",
            "text/html",
            format!("<html><body><pre>{marker}</pre></body></html>").into_bytes(),
        ),
        (
            "json, no slurmrestd meta",
            "application/json",
            serde_json::to_vec(&json!({
                "Code": "Success", "SecretAccessKey": marker,
                "errors": [{"error": marker, "description": marker, "source": marker}],
                "warnings": [{"description": marker}],
            }))
            .unwrap(),
        ),
        (
            "json with numbered errors, no meta",
            "application/json",
            serde_json::to_vec(&json!({
                "errors": [{"error_number": 2000, "error": marker, "description": marker}],
            }))
            .unwrap(),
        ),
        (
            "json, values of the wrong type",
            "application/json",
            serde_json::to_vec(&json!({
                "jobs": marker, "nodes": marker, "statistics": marker, "job_id": marker,
                "status": marker, "pings": marker, "partitions": marker,
            }))
            .unwrap(),
        ),
        (
            "json, wrong types inside records",
            "application/json",
            serde_json::to_vec(&json!({
                "jobs": [{"job_id": marker, "job_state": marker}],
                "nodes": [{"name": 5, "state": marker}],
            }))
            .unwrap(),
        ),
        (
            "json cut short",
            "application/json",
            format!("{{\"jobs\": [\"{marker}").into_bytes(),
        ),
    ];
    let token = hex(&random_bytes(24));
    let mut errors = 0;
    for status in [200, 401, 403, 404, 500, 502, 511] {
        for (what, content_type, body) in &bodies {
            let server = wiremock::MockServer::start().await;
            wiremock::Mock::given(wiremock::matchers::any())
                .respond_with(
                    wiremock::ResponseTemplate::new(status)
                        .set_body_raw(body.clone(), content_type),
                )
                .mount(&server)
                .await;
            let client = deputy(&server.uri(), &token, RetryPolicy::none());
            let results: Vec<(&str, Result<(), SlurmError>)> = vec![
                ("cluster_info", client.cluster_info().await.map(|_| ())),
                ("nodes", client.nodes(None).await.map(|_| ())),
                ("node", client.node("n1").await.map(|_| ())),
                ("partitions", client.partitions().await.map(|_| ())),
                ("job", client.job(2).await.map(|_| ())),
                ("jobs", client.jobs(None).await.map(|_| ())),
                ("jobs_state", client.jobs_state(&[2]).await.map(|_| ())),
                (
                    "submit_job",
                    client.submit_job(&submit_request()).await.map(|_| ()),
                ),
                ("cancel_job", client.cancel_job(2).await),
                ("drain_node", client.drain_node("n1", "test").await),
            ];
            for (call, result) in results {
                let case = format!("HTTP {status}, {what}, {call}");
                let error = match result {
                    Err(error) => error,
                    Ok(()) if status == 200 => continue,
                    Ok(()) => panic!("{case}: succeeded"),
                };
                errors += 1;
                for (form, text) in [
                    ("Display", error.to_string()),
                    ("Chain", Chain(&error).to_string()),
                    ("Debug", format!("{error:?}")),
                ] {
                    assert!(
                        !text.contains(&marker),
                        "{case}: {form} repeats the body: {text}"
                    );
                }
                // The error still says what went wrong: a failed status is named, unless a Slurm
                // error number classified the answer.
                let text = Chain(&error).to_string();
                assert!(
                    status == 200
                        || text.contains(&format!("HTTP {status}"))
                        || error.slurm_errno().is_some(),
                    "{case}: {text}"
                );
            }
        }
    }
    assert!(errors > 300, "{errors} errors");
    // What the error leaves out is in the debug log, for whoever operates the operator.
    let logs = String::from_utf8_lossy(&capture().bytes()).into_owned();
    assert!(
        logs.lines()
            .any(|l| l.contains("DEBUG") && l.contains(&marker)),
        "the body's start is not in the debug log"
    );

    // slurmrestd's own JSON answer keeps its message (Slurm's words, needed to act on it).
    let server = wiremock::MockServer::start().await;
    wiremock::Mock::given(wiremock::matchers::any())
        .respond_with(
            wiremock::ResponseTemplate::new(500)
                .set_body_json(common::hostile::recorded("submit_invalid_partition")),
        )
        .mount(&server)
        .await;
    let error = deputy(&server.uri(), &token, RetryPolicy::none())
        .submit_job(&submit_request())
        .await
        .unwrap_err();
    assert_eq!(error.category(), "InvalidPartition", "{error}");
    assert!(error.to_string().contains("Invalid partition"), "{error}");
}

/// Plain http must be allowed explicitly: refused, the client is not built (no request is ever
/// made) and the error says what to do; https and an allowed http are accepted.
#[tokio::test]
async fn plain_http_endpoints_are_refused_unless_allowed() {
    let server = wiremock::MockServer::start().await;
    let credentials = Arc::new(Credentials::token("t", None).unwrap());
    let refused = ClientConfig::new(&server.uri())
        .unwrap()
        .allow_plaintext(false);
    assert!(refused.is_plaintext());
    let error = SlurmClient::new(refused.clone(), credentials.clone()).unwrap_err();
    assert_eq!(error.category(), "InvalidEndpoint", "{error}");
    let text = error.to_string();
    assert!(
        text.contains("https") && text.contains("allow plain http explicitly"),
        "{text}"
    );
    assert!(server.received_requests().await.unwrap().is_empty());

    SlurmClient::new(refused.allow_plaintext(true), credentials.clone()).unwrap();
    let https = ClientConfig::new("https://slurm.example:6820")
        .unwrap()
        .allow_plaintext(false);
    assert!(!https.is_plaintext());
    SlurmClient::new(https, credentials).unwrap();
}

// --- Secrets only from the credentials namespace ------------------------------------------------

fn committed_schema(crd: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("crds/{crd}.yaml"));
    let doc: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

/// Every object reference in `node` (properties named `*SecretRef` / `*ConfigMapRef`), and every
/// property named `namespace`, with their paths.
fn walk(node: &Value, path: &str, refs: &mut Vec<(String, Value)>, namespaces: &mut Vec<String>) {
    let Some(properties) = node.get("properties").and_then(Value::as_object) else {
        if let Some(items) = node.get("items") {
            walk(items, &format!("{path}[]"), refs, namespaces);
        }
        return;
    };
    for (name, child) in properties {
        let child_path = format!("{path}.{name}");
        if name == "namespace" {
            namespaces.push(child_path.clone());
        }
        if name.ends_with("SecretRef") || name.ends_with("ConfigMapRef") {
            refs.push((child_path.clone(), child.clone()));
        }
        walk(child, &child_path, refs, namespaces);
    }
}

/// The SlurmCluster CRD gives no way to name a namespace: its Secret and ConfigMap references hold a
/// name (an RFC 1123 subdomain: no `/`) and a key, nothing else, and unknown fields are pruned.
#[test]
fn cluster_references_hold_only_a_name_and_a_key() {
    let schema = committed_schema("slurmclusters.slurm.rs");
    let spec = &schema["properties"]["spec"];
    let (mut refs, mut namespaces) = (Vec::new(), Vec::new());
    walk(spec, "spec", &mut refs, &mut namespaces);
    assert!(namespaces.is_empty(), "{namespaces:?}");
    let paths: BTreeSet<&str> = refs.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        BTreeSet::from([
            "spec.auth.jwt.keySecretRef",
            "spec.auth.tokenSecretRef",
            "spec.tls.caConfigMapRef",
            "spec.tls.caSecretRef",
        ])
    );
    for (path, reference) in &refs {
        let fields: BTreeSet<&str> = reference["properties"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(fields, BTreeSet::from(["key", "name"]), "{path}");
        let name = &reference["properties"]["name"];
        assert_eq!(
            name["pattern"], r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
            "{path}"
        );
        assert_eq!(name["maxLength"], 253, "{path}");
    }
    assert!(
        !serde_json::to_string(spec)
            .unwrap()
            .contains("x-kubernetes-preserve-unknown-fields"),
        "an unknown field (e.g. a namespace) would be kept"
    );
    // And in Rust: a `namespace` given anyway is dropped on the way in.
    let spec: slurm_operator::crd::SlurmClusterSpec = serde_json::from_value(json!({
        "endpoint": "https://slurmrestd:6820",
        "auth": {"jwt": {"keySecretRef": {"name": "jwt", "namespace": "kube-system"}}},
        "tls": {"caSecretRef": {"name": "ca", "namespace": "kube-system"}},
    }))
    .unwrap();
    assert!(
        !serde_json::to_string(&spec)
            .unwrap()
            .contains("kube-system")
    );
}

// --- RBAC ---------------------------------------------------------------------------------------

/// The operator's RBAC (`helm/slurm-operator/files/rbac-rules.yaml`, the one list the chart
/// renders; `hack/helm/test_charts.py` checks the rendering and the code against it): Secrets
/// are only read, and created only in the credentials namespace, for the tag key, when the
/// operator makes it (`tagKey.create`); never updated, patched or deleted. Nothing is granted by
/// wildcard, and nothing else touches Secrets.
#[test]
fn rbac_never_changes_secrets() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("helm/slurm-operator/files/rbac-rules.yaml");
    let rules: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let rules = rules["rules"].as_array().unwrap();
    let strings = |rule: &Value, field: &str| -> Vec<String> {
        rule[field]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    };
    let mut secret_verbs = BTreeSet::new();
    for rule in rules {
        let (groups, resources, verbs) = (
            strings(rule, "apiGroups"),
            strings(rule, "resources"),
            strings(rule, "verbs"),
        );
        for field in [&groups, &resources, &verbs] {
            assert!(!field.iter().any(|v| v.contains('*')), "wildcard in {rule}");
        }
        // Impersonation, escalation or token minting would reach around the rules.
        assert!(
            !verbs
                .iter()
                .any(|v| ["impersonate", "escalate", "bind"].contains(&v.as_str())),
            "{rule}"
        );
        assert!(
            !resources.iter().any(|r| r == "serviceaccounts/token"),
            "{rule}"
        );
        if groups.iter().any(String::is_empty)
            && resources
                .iter()
                .any(|r| r == "secrets" || r.starts_with("secrets/"))
        {
            assert_eq!(resources, ["secrets"], "secrets share a rule: {rule}");
            assert_eq!(rule["scope"], "credentials", "{rule}");
            if verbs.iter().any(|v| v == "create") {
                assert_eq!(verbs, ["create"], "create shares a rule: {rule}");
                assert_eq!(rule["when"], "tagKey.create", "{rule}");
            }
            secret_verbs.extend(verbs);
        }
    }
    assert_eq!(
        secret_verbs,
        BTreeSet::from(["get", "list", "watch", "create"].map(str::to_owned))
    );
}
