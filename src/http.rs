//! The operator's HTTP endpoints for kubelet probes and Prometheus:
//!
//! - `/healthz`: 200 while the process serves HTTP (liveness);
//! - `/readyz`: 200 once the controllers run (their caches are filled), 503 before and while
//!   shutting down (readiness);
//! - `/metrics`: the Prometheus/OpenMetrics text exposition of [`Metrics`].
//!
//! Every Pod of the cluster may reach the port (the chart's NetworkPolicy is off by default),
//! so the server bounds what one client can hold: see [`serve`].

use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::warn;

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

const NOT_READY: u8 = 0;
const READY: u8 = 1;
const STOPPING: u8 = 2;

/// Whether the operator is ready: not ready at first, ready once its controllers run, and not
/// ready for good once it stops (a late [`Readiness::ready`] cannot undo [`Readiness::stop`]).
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<AtomicU8>);

impl Readiness {
    /// Ready, unless the operator is already stopping.
    pub fn ready(&self) {
        let _ = self
            .0
            .compare_exchange(NOT_READY, READY, Ordering::AcqRel, Ordering::Acquire);
    }

    /// Not ready from now on.
    pub fn stop(&self) {
        self.0.store(STOPPING, Ordering::Release);
    }

    pub fn get(&self) -> bool {
        self.0.load(Ordering::Acquire) == READY
    }
}

/// How many `/metrics` answers are encoded at once: each walks every cached object on a
/// worker thread; more requests wait their turn instead of taking every worker.
const METRICS_AT_ONCE: usize = 2;

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    readiness: Readiness,
    encoding: Arc<Semaphore>,
}

/// The routes, without a listener (tests can drive it directly).
pub fn router(metrics: Arc<Metrics>, readiness: Readiness) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(AppState {
            metrics,
            readiness,
            encoding: Arc::new(Semaphore::new(METRICS_AT_ONCE)),
        })
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
    // Never closed, so the permit always comes.
    let _turn = state.encoding.acquire().await;
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

/// What one client may hold of the server. A request's head must arrive within
/// `header_read_timeout` (which also closes a keep-alive connection idle that long) and fit in
/// `max_buf_size`; a connection is closed after `lifetime` (after its request in flight), and
/// past `connections` open ones, or `per_peer` from one address, a new one is closed at once
/// (so that one Pod cannot take the kubelet's probes' place). Without them (axum's own `serve`
/// sets no timer, so hyper enforces no header timeout) a few hundred connections that each
/// send a partial head and wait held the operator's memory until it was OOM-killed.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub header_read_timeout: Duration,
    pub max_buf_size: usize,
    pub lifetime: Duration,
    pub connections: usize,
    pub per_peer: usize,
    /// How long a connection may take to finish its request once told to close.
    pub close_grace: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(5),
            max_buf_size: 16 * 1024,
            lifetime: Duration::from_secs(60),
            connections: 256,
            per_peer: 32,
            close_grace: Duration::from_secs(5),
        }
    }
}

/// Serve `router` with `limits` until `shutdown` is cancelled; requests in flight finish
/// first (each within `close_grace`).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
    limits: Limits,
) -> Result<(), Error> {
    let slots = Arc::new(Semaphore::new(limits.connections));
    let peers = Arc::new(Peers::default());
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_buf_size);
    loop {
        let stream = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                // The peer gave up before the accept: nothing to do.
                Err(e) if is_connection_error(&e) => continue,
                // Out of file descriptors, say: try again shortly rather than spin.
                Err(error) => {
                    warn!(%error, "the health and metrics server cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            },
        };
        let (stream, peer) = stream;
        let Some(peer_slot) = peers.take(peer.ip(), limits.per_peer) else {
            drop(stream);
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let connection = http.serve_connection(
            TokioIo::new(stream),
            TowerToHyperService::new(router.clone()),
        );
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let _slots = (slot, peer_slot);
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => return,
                () = tokio::time::sleep(limits.lifetime) => {}
                () = shutdown.cancelled() => {}
            }
            connection.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(limits.close_grace, connection).await;
        });
    }
    drop(listener);
    // Every connection returns its slot within `close_grace` of the shutdown.
    let _all = slots
        .acquire_many(u32::try_from(limits.connections).unwrap_or(u32::MAX))
        .await;
    Ok(())
}

/// Open connections per peer address.
#[derive(Debug, Default)]
struct Peers(std::sync::Mutex<std::collections::HashMap<IpAddr, usize>>);

/// One connection of a peer's: counted until dropped.
struct PeerSlot {
    peers: Arc<Peers>,
    ip: IpAddr,
}

impl Peers {
    /// A slot for one more connection from `ip`, unless it holds `max` already. An IPv4
    /// address is counted as itself on the dual-stack listener too (not as `::ffff:a.b.c.d`).
    fn take(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<PeerSlot> {
        let ip = ip.to_canonical();
        let mut open = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(ip).or_default();
        if *count >= max {
            return None;
        }
        *count += 1;
        Some(PeerSlot {
            peers: Arc::clone(self),
            ip,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = self.peers.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// Errors of one connection, not of the listener (as hyper's and axum's accept loops judge).
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::ConnectionRefused | ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset
    )
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
            Limits::default(),
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
        readiness.ready();
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
        readiness.stop();
        assert_eq!(get("/readyz").await.status(), 503);

        shutdown.cancel();
        server.await.unwrap().unwrap();
    }

    #[test]
    fn readiness_once_stopped_stays_stopped() {
        let readiness = Readiness::default();
        assert!(!readiness.get());
        readiness.stop();
        // The controllers' late "running" (a race with the signal) does not undo the stop.
        readiness.ready();
        assert!(!readiness.get());
    }

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    /// A server with `limits` on a free port of the loopback.
    async fn limited(limits: Limits) -> (SocketAddr, CancellationToken) {
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let router = router(Metrics::new(), Readiness::default());
        tokio::spawn(serve(listener, router, shutdown.clone(), limits));
        (addr, shutdown)
    }

    /// What the server sends before it closes the connection (bounded: a server that never
    /// closes fails the test instead of hanging it). A close with our bytes unread is a reset.
    async fn until_closed(stream: &mut TcpStream) -> String {
        let mut got = Vec::new();
        match tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut got))
            .await
            .expect("the server closes the connection")
        {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
            Err(e) => panic!("read: {e}"),
        }
        String::from_utf8_lossy(&got).into_owned()
    }

    async fn healthz(addr: SocketAddr) -> String {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        until_closed(&mut stream).await
    }

    #[tokio::test]
    async fn a_client_that_never_finishes_its_request_head_is_closed() {
        let (addr, _shutdown) = limited(Limits {
            header_read_timeout: Duration::from_millis(300),
            ..Limits::default()
        })
        .await;
        // Half a head, then nothing: closed once the header timeout passes (hyper answers 408).
        let mut slow = TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        let answer = until_closed(&mut slow).await;
        assert!(!answer.contains("200 OK"), "{answer}");
        // A keep-alive connection left idle is closed the same way.
        let mut idle = TcpStream::connect(addr).await.unwrap();
        idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        assert!(until_closed(&mut idle).await.starts_with("HTTP/1.1 200 OK"));
    }

    #[tokio::test]
    async fn a_request_head_larger_than_the_buffer_is_refused() {
        // A header timeout far away: only the buffer's bound can end this.
        let (addr, _shutdown) = limited(Limits {
            header_read_timeout: Duration::from_secs(600),
            ..Limits::default()
        })
        .await;
        let mut big = TcpStream::connect(addr).await.unwrap();
        let mut head = b"GET /healthz HTTP/1.1\r\nX-Pad: ".to_vec();
        head.extend(std::iter::repeat_n(b'a', 64 * 1024));
        // The server may close before it has read all of it.
        let _ = big.write_all(&head).await;
        let answer = until_closed(&mut big).await;
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 431"),
            "{answer}"
        );
        assert!(healthz(addr).await.starts_with("HTTP/1.1 200 OK"));
    }

    #[tokio::test]
    async fn connections_past_the_limit_are_closed_at_once_and_slots_come_back() {
        // In all, and from one address (the test's connections all come from the loopback).
        let all = Limits {
            connections: 2,
            ..Limits::default()
        };
        let one_peer = Limits {
            per_peer: 2,
            ..Limits::default()
        };
        for limits in [all, one_peer] {
            // A header timeout far away: only a client leaving frees a slot.
            let (addr, _shutdown) = limited(Limits {
                header_read_timeout: Duration::from_secs(600),
                ..limits
            })
            .await;
            // Two connections hold both slots (a partial head).
            let mut held = Vec::new();
            for _ in 0..2 {
                let mut stream = TcpStream::connect(addr).await.unwrap();
                stream
                    .write_all(b"GET /healthz HTTP/1.1\r\n")
                    .await
                    .unwrap();
                held.push(stream);
            }
            // Once the server has accepted both, a third gets nothing.
            let until = |served: bool| {
                tokio::time::timeout(Duration::from_secs(20), async move {
                    loop {
                        let answer = healthz(addr).await;
                        if answer.is_empty() != served {
                            break answer;
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                })
            };
            let refused = until(false).await;
            assert_eq!(refused.ok().as_deref(), Some(""), "{limits:?}");
            // A slot freed by a client that leaves serves the next one.
            drop(held.pop());
            let served = until(true).await.expect("a slot comes back");
            assert!(
                served.starts_with("HTTP/1.1 200 OK"),
                "{limits:?}: {served}"
            );
        }
    }

    #[test]
    fn a_peer_is_counted_by_its_address_over_ipv4_and_ipv6() {
        let peers = Arc::new(Peers::default());
        let v4: IpAddr = "10.0.0.7".parse().unwrap();
        let mapped: IpAddr = "::ffff:10.0.0.7".parse().unwrap();
        let first = peers.take(v4, 2).unwrap();
        let second = peers.take(mapped, 2).unwrap();
        assert!(peers.take(v4, 2).is_none(), "the same peer twice already");
        assert!(peers.take("10.0.0.8".parse().unwrap(), 2).is_some());
        drop((first, second));
        assert!(peers.take(mapped, 2).is_some(), "its slots back");
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
