//! The operator's HTTP endpoints for kubelet probes and Prometheus:
//!
//! - `/healthz`: 200 while the process serves HTTP (liveness);
//! - `/readyz`: 200 once the controllers run (their caches are filled), 503 before and while
//!   shutting down (readiness);
//! - `/metrics`: the Prometheus/OpenMetrics text exposition of [`Metrics`].

use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// The OpenMetrics text format that `prometheus-client` writes.
const METRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot listen on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("the health and metrics server failed")]
    Serve(#[source] std::io::Error),
}

impl Error {
    pub fn category(&self) -> &'static str {
        match self {
            Self::Bind { .. } => "BindFailed",
            Self::Serve(_) => "ServeFailed",
        }
    }
}

/// Whether the operator is ready; flipped by the runtime.
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    pub fn set(&self, ready: bool) {
        self.0.store(ready, Ordering::Relaxed);
    }

    pub fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    readiness: Readiness,
}

/// The routes, without a listener (tests can drive it directly).
pub fn router(metrics: Arc<Metrics>, readiness: Readiness) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(AppState { metrics, readiness })
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<AppState>) -> (StatusCode, &'static str) {
    if state.readiness.get() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

async fn metrics_text(State(state): State<AppState>) -> Response {
    match state.metrics.encode() {
        Ok(text) => ([(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)], text).into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "cannot encode the metrics\n",
        )
            .into_response(),
    }
}

/// Listen on `addr` (port 0 picks a free port; see the listener's `local_addr`). IPv6's
/// unspecified address (`[::]`, the default) listens on IPv6 and IPv4 both (the kubelet probes
/// whichever address a Pod has first: IPv6 on IPv6 and IPv6-first clusters); on a host without
/// IPv6, on IPv4's (`0.0.0.0`), same port.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, Error> {
    if addr.ip() == IpAddr::V6(Ipv6Addr::UNSPECIFIED) {
        match dual_stack(addr) {
            Ok(listener) => return Ok(listener),
            // The port taken, or not ours to take: so it would be on IPv4 too.
            Err(source)
                if matches!(
                    source.kind(),
                    ErrorKind::AddrInUse | ErrorKind::PermissionDenied
                ) =>
            {
                return Err(Error::Bind { addr, source });
            }
            Err(_) => {
                let addr = SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), addr.port());
                return TcpListener::bind(addr)
                    .await
                    .map_err(|source| Error::Bind { addr, source });
            }
        }
    }
    TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })
}

/// A listener on IPv6 address `addr` that takes IPv4 connections too (`IPV6_V6ONLY` off, not
/// left to the host's `net.ipv6.bindv6only`), with `SO_REUSEADDR` as tokio's `bind` sets it.
fn dual_stack(addr: SocketAddr) -> std::io::Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_only_v6(false)?;
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    TcpListener::from_std(socket.into())
}

/// Serve `router` until `shutdown` is cancelled; requests in flight finish first.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
        .map_err(Error::Serve)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn probes_and_metrics_are_served_until_shutdown() {
        let metrics = Metrics::new();
        metrics.reconciled("cluster", std::time::Duration::from_millis(1));
        let readiness = Readiness::default();
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(serve(
            listener,
            router(metrics, readiness.clone()),
            shutdown.clone(),
        ));
        crate::tls::install_crypto_provider();
        let http = reqwest::Client::new();
        let get = |path: &'static str| {
            let http = http.clone();
            let url = format!("{base}{path}");
            async move { http.get(url).send().await.unwrap() }
        };

        assert_eq!(get("/healthz").await.status(), 200);
        assert_eq!(get("/readyz").await.status(), 503);
        readiness.set(true);
        assert_eq!(get("/readyz").await.status(), 200);
        let response = get("/metrics").await;
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.headers()["content-type"].to_str().unwrap(),
            METRICS_CONTENT_TYPE
        );
        let text = response.text().await.unwrap();
        assert!(
            text.contains("slurm_operator_reconciles_total{controller=\"cluster\"} 1"),
            "{text}"
        );
        assert_eq!(get("/nope").await.status(), 404);

        shutdown.cancel();
        server.await.unwrap().unwrap();
    }

    /// The default address, `[::]`, takes connections over IPv4 and over IPv6 (where the host
    /// has IPv6: this one's loopback is checked first); a
    /// port taken there is a bind error, not a silent move to IPv4.
    #[tokio::test]
    async fn the_unspecified_ipv6_address_takes_ipv4_and_ipv6() {
        let listener = bind("[::]:0".parse().unwrap()).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accept = tokio::spawn(async move {
            for _ in 0..2 {
                let _ = listener.accept().await.unwrap();
            }
        });
        let ipv6 = std::net::TcpListener::bind("[::1]:0").is_ok();
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("over IPv4");
        if ipv6 {
            tokio::net::TcpStream::connect(("::1", port))
                .await
                .expect("over IPv6");
        } else {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .expect("over IPv4, again");
        }
        accept.await.unwrap();

        let taken = bind("[::]:0".parse().unwrap()).await.unwrap();
        let port = taken.local_addr().unwrap().port();
        let error = bind(SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), port))
            .await
            .unwrap_err();
        assert_eq!(error.category(), "BindFailed");
    }

    #[tokio::test]
    async fn a_busy_port_is_a_bind_error() {
        let taken = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let error = bind(taken.local_addr().unwrap()).await.unwrap_err();
        assert_eq!(error.category(), "BindFailed");
    }
}
