//! Proxies in front of the real slurmrestd, for tests that need it slower or more hostile than
//! it is on demand: the answers are still the real ones.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;

/// Serve `app` on a free local port. Returns its URL.
pub async fn serve(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// Pass `request` on to `upstream` (its method, path, query, Slurm headers and body) and return
/// the answer's status and body; 502 when upstream does not answer.
pub async fn forward(http: &reqwest::Client, upstream: &str, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let target = format!(
        "{upstream}{}",
        parts.uri.path_and_query().map_or("/", |p| p.as_str())
    );
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let mut forward = http.request(parts.method, target).body(body);
    for (name, value) in &parts.headers {
        if name.as_str().starts_with("x-slurm-") || name == "content-type" {
            forward = forward.header(name.as_str(), value.as_bytes());
        }
    }
    match forward.send().await {
        Ok(answer) => {
            let status = answer.status().as_u16();
            let body = answer.bytes().await.unwrap_or_default();
            Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Body::from(body))
                .unwrap()
        }
        Err(_) => Response::builder()
            .status(StatusCode::BAD_GATEWAY)
            .body(Body::empty())
            .unwrap(),
    }
}

/// The full job state listings a [`slow_listings`] proxy held.
#[derive(Debug, Default)]
pub struct Held {
    /// When each was asked (and passed on at once), and when its answer was let go.
    pub listings: Mutex<Vec<(Instant, Option<Instant>)>>,
}

impl Held {
    /// When the listing asked first at or after `after` was asked, and let go (if it was).
    pub fn first_after(&self, after: Instant) -> Option<(Instant, Option<Instant>)> {
        let listings = self.listings.lock().unwrap();
        listings.iter().find(|(asked, _)| *asked >= after).copied()
    }
}

/// The proxy's own HTTP client (the crate's TLS provider installed first, as no test may have
/// built a client before it).
fn client() -> reqwest::Client {
    slurm_operator::tls::install_crypto_provider();
    reqwest::Client::new()
}

/// A proxy to `upstream` that passes every request on at once, and holds the answer to each
/// full job state listing (`/jobs/state/` without `job_id`) for `hold` before it lets it go:
/// what slurmrestd does at 100 000 jobs (20 s and more), with the state as of the asking.
/// Returns its URL and what it held.
pub async fn slow_listings(upstream: String, hold: Duration) -> (String, Arc<Held>) {
    let held = Arc::new(Held::default());
    let http = client();
    let app = {
        let held = held.clone();
        axum::Router::new().fallback(move |request: Request| {
            let (http, upstream, held) = (http.clone(), upstream.clone(), held.clone());
            async move {
                if !is_listing(&request) {
                    return forward(&http, &upstream, request).await;
                }
                let slot = {
                    let mut listings = held.listings.lock().unwrap();
                    listings.push((Instant::now(), None));
                    listings.len() - 1
                };
                let answer = forward(&http, &upstream, request).await;
                tokio::time::sleep(hold).await;
                held.listings.lock().unwrap()[slot].1 = Some(Instant::now());
                answer
            }
        })
    };
    (serve(app).await, held)
}

/// Whether `request` is a full job state listing (`/jobs/state/` without `job_id`).
fn is_listing(request: &Request) -> bool {
    request.uri().path().ends_with("/jobs/state/")
        && !request.uri().query().is_some_and(|q| q.contains("job_id"))
}

/// A proxy to `upstream` that answers every full job state listing with HTTP 503 while the
/// returned switch is on, and passes everything else on. Returns its URL and the switch.
pub async fn failing_listings(upstream: String) -> (String, Arc<AtomicBool>) {
    refusing(upstream, is_listing).await
}

/// A proxy to `upstream` that answers each request `refused` picks with HTTP 503 while the
/// returned switch is on, and passes everything else on. Returns its URL and the switch.
pub async fn refusing(
    upstream: String,
    refused: fn(&Request) -> bool,
) -> (String, Arc<AtomicBool>) {
    refusing_with(upstream, refused, StatusCode::SERVICE_UNAVAILABLE).await
}

/// [`refusing`] with another status than 503 (a 403 is not a failure for now).
pub async fn refusing_with(
    upstream: String,
    refused: fn(&Request) -> bool,
    status: StatusCode,
) -> (String, Arc<AtomicBool>) {
    let failing = Arc::new(AtomicBool::new(false));
    let http = client();
    let app = {
        let failing = failing.clone();
        axum::Router::new().fallback(move |request: Request| {
            let (http, upstream, failing) = (http.clone(), upstream.clone(), failing.clone());
            async move {
                if refused(&request) && failing.load(Ordering::SeqCst) {
                    return Response::builder()
                        .status(status)
                        .body(Body::from("refused by the test proxy"))
                        .unwrap();
                }
                forward(&http, &upstream, request).await
            }
        })
    };
    (serve(app).await, failing)
}
