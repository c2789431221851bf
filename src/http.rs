//! The operator's HTTP endpoints for kubelet probes and Prometheus:
//!
//! - `/healthz`: 200 while the process serves HTTP (liveness);
//! - `/readyz`: 200 once the controllers run (their caches are filled), 503 before and while
//!   shutting down (readiness);
//! - `/metrics`: the Prometheus/OpenMetrics text exposition of [`Metrics`].

use std::net::SocketAddr;
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

/// Listen on `addr` (port 0 picks a free port; see the listener's `local_addr`).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })
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

    #[tokio::test]
    async fn a_busy_port_is_a_bind_error() {
        let taken = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let error = bind(taken.local_addr().unwrap()).await.unwrap_err();
        assert_eq!(error.category(), "BindFailed");
    }
}
