//! The HTTP layer under the generated client: the client's inner state ([`Transport`]: the
//! credentials, the request observer, the body limit), what the hooks saw of each request
//! ([`observed`]: the HTTP status, which progenitor drops when a body does not decode, e.g.
//! slurmrestd's plain-text 401), and bounded response bodies. The hooks themselves are in
//! `hooks`, so the generated client depends on this module and not the other way round.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use futures::StreamExt;

use super::auth::{AuthError, Credentials};
use super::elements::ElementBudget;
use super::error::{MAX_LOCATION_CHARS, shortened};
use super::utf8::Utf8Repair;

/// Receives one observation per slurmrestd request (for metrics). `operation` is the OpenAPI
/// operation id, a static, low-cardinality label.
pub trait RequestObserver: Send + Sync {
    fn observe(&self, operation: &'static str, status: Option<u16>, elapsed: Duration);
}

/// The generated client's inner state: swapped credentials and the request observer.
pub struct Transport {
    credentials: ArcSwap<Credentials>,
    pub(super) observer: Option<Arc<dyn RequestObserver>>,
    /// Bytes of one response body read at most (`ClientConfig::max_response_bytes`).
    pub(super) max_response_bytes: u64,
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport")
            .field("credentials", &self.credentials.load())
            .finish_non_exhaustive()
    }
}

impl Transport {
    pub(crate) fn new(
        credentials: Arc<Credentials>,
        observer: Option<Arc<dyn RequestObserver>>,
        max_response_bytes: u64,
    ) -> Self {
        Self {
            credentials: ArcSwap::new(credentials),
            observer,
            max_response_bytes,
        }
    }

    pub(crate) fn set_credentials(&self, credentials: Arc<Credentials>) {
        self.credentials.store(credentials);
    }

    pub(crate) fn credentials(&self) -> Arc<Credentials> {
        self.credentials.load_full()
    }
}

/// What the hooks saw of the one request a facade call made, and the timeout the call gave it.
#[derive(Debug, Default)]
pub(crate) struct Exchange {
    /// Set by the caller: how long this request may take (the hooks put it on the request, over
    /// the client's default).
    pub timeout: Option<Duration>,
    pub status: Option<u16>,
    pub auth_error: Option<AuthError>,
    /// A redirect's target (see [`redirect_target`]) when the answer was one.
    pub redirect_to: Option<String>,
}

tokio::task_local! {
    static EXCHANGE: RefCell<Exchange>;
}

/// Run one generated-client call, its request given `timeout`, and return its result with what
/// the hooks observed.
pub(crate) async fn observed<T, F>(timeout: Duration, call: F) -> (T, Exchange)
where
    F: Future<Output = T>,
{
    let exchange = Exchange {
        timeout: Some(timeout),
        ..Exchange::default()
    };
    EXCHANGE
        .scope(RefCell::new(exchange), async move {
            let result = call.await;
            let exchange = EXCHANGE.with(|cell| std::mem::take(&mut *cell.borrow_mut()));
            (result, exchange)
        })
        .await
}

/// The timeout the running call gave its request ([`observed`]); `None` outside one.
pub(super) fn timeout() -> Option<Duration> {
    EXCHANGE
        .try_with(|cell| cell.borrow().timeout)
        .ok()
        .flatten()
}

pub(super) fn record(update: impl FnOnce(&mut Exchange)) {
    // Outside `observed` (nobody listening) there is nothing to record.
    let _ = EXCHANGE.try_with(|cell| update(&mut cell.borrow_mut()));
}

/// For a redirect (any 3xx but 304 Not Modified, which slurmrestd answers to an unchanged list),
/// its `Location` as an error may name it: without user info, query or fragment (where
/// credentials, tokens and session ids travel), control characters escaped, at most
/// `MAX_LOCATION_CHARS`; empty without one. `None` for any other answer. The client never
/// follows it (`Policy::none()`).
pub(super) fn redirect_target(response: &reqwest::Response) -> Option<String> {
    let status = response.status();
    if !status.is_redirection() || status == reqwest::StatusCode::NOT_MODIFIED {
        return None;
    }
    let location = response
        .headers()
        .get(reqwest::header::LOCATION)
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
        .unwrap_or_default();
    Some(shortened(
        &location_without_secrets(&location),
        MAX_LOCATION_CHARS,
    ))
}

/// `location` as a status, an Event or a log may show it: without the user info, query and
/// fragment it may carry; not at all when an `@` is left (`u:pw@host` parses as scheme `u`, and
/// `//u:pw@host/x` is a relative reference that is not parsed).
pub fn location_without_secrets(location: &str) -> String {
    let shown = url_without_secrets(location);
    if shown.contains('@') {
        return "(not shown: it may hold credentials)".to_owned();
    }
    shown
}

fn url_without_secrets(location: &str) -> String {
    match url::Url::parse(location) {
        Ok(mut url) => {
            // Fails only for URLs that cannot have user info (no host): nothing to remove then.
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.set_query(None);
            url.set_fragment(None);
            url.to_string()
        }
        // A relative reference: its path only.
        Err(_) => location
            .split(['?', '#'])
            .next()
            .unwrap_or_default()
            .to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_redirect_target_loses_its_credentials_query_and_fragment() {
        for (location, want) in [
            (
                "https://user:pw@elsewhere.example:8443/a/b?token=t#f",
                "https://elsewhere.example:8443/a/b",
            ),
            ("/login?session=s", "/login"),
            ("//elsewhere.example/x#y", "//elsewhere.example/x"),
            ("", ""),
            (
                "//user:secret@elsewhere.example/x",
                "(not shown: it may hold credentials)",
            ),
            (
                "user:secret@elsewhere.example/x",
                "(not shown: it may hold credentials)",
            ),
        ] {
            assert_eq!(location_without_secrets(location), want, "{location:?}");
        }
    }
}

/// The error a bounded body fails with once it passes its limit.
#[derive(Debug, thiserror::Error)]
#[error("the response body exceeds {limit} bytes")]
struct BodyTooLarge {
    limit: u64,
}

/// The error a bounded body fails with once its elements would cost more to decode than its
/// size allows ([`ElementBudget`]).
#[derive(Debug, thiserror::Error)]
#[error("the response body holds more elements than its {bytes} bytes allow")]
struct TooManyElements {
    bytes: u64,
}

/// Why a bounded body stopped being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyRefused {
    /// It passed this many bytes.
    TooLarge { limit: u64 },
    /// Its elements would cost too much to decode; this many bytes had been read.
    TooManyElements { bytes: u64 },
}

/// Why a body read failed, if `error` is a bounded body refusing to go on.
pub(crate) fn body_refused(error: &(dyn std::error::Error + 'static)) -> Option<BodyRefused> {
    let mut current = Some(error);
    while let Some(cause) = current {
        if let Some(too_large) = cause.downcast_ref::<BodyTooLarge>() {
            return Some(BodyRefused::TooLarge {
                limit: too_large.limit,
            });
        }
        if let Some(too_many) = cause.downcast_ref::<TooManyElements>() {
            return Some(BodyRefused::TooManyElements {
                bytes: too_many.bytes,
            });
        }
        current = cause.source();
    }
    None
}

/// `response` with a body that fails with [`BodyTooLarge`] once more than `limit` bytes arrive
/// (at once when `Content-Length` already says so), so neither progenitor's `bytes()` nor the
/// facade's error path can read an endless or huge body into memory. reqwest has no such limit of
/// its own. Its total request timeout stays on the body underneath: a slow endless body still
/// ends as a timeout. It fails with [`TooManyElements`] once what arrived would decode into far
/// more than its size ([`ElementBudget`] for `operation`, the generated client's operation id),
/// before serde sees any of it. Invalid UTF-8 in it is replaced ([`Utf8Repair`]), so that one
/// job's odd name does not make the whole answer undecodable.
pub(super) fn bounded(
    response: reqwest::Response,
    limit: u64,
    operation: &str,
) -> reqwest::Response {
    type BoxError = Box<dyn std::error::Error + Send + Sync>;
    let status = response.status();
    let version = response.version();
    let mut headers = response.headers().clone();
    // The repair below may lengthen the body: its length is no longer the one declared.
    headers.remove(reqwest::header::CONTENT_LENGTH);
    let declared_too_large = response.content_length().is_some_and(|n| n > limit);
    let chunks = Box::pin(response.bytes_stream());
    // Ok: reading, with the bytes seen so far; Err(true): fail at the next poll; Err(false): ended.
    let start = if declared_too_large {
        Err(true)
    } else {
        Ok((chunks, ElementBudget::new(operation), Utf8Repair::default()))
    };
    let body = futures::stream::unfold(start, move |state| async move {
        let too_large = || Box::new(BodyTooLarge { limit }) as BoxError;
        let (mut chunks, mut budget, mut repair) = match state {
            Ok(reading) => reading,
            Err(true) => return Some((Err(too_large()), Err(false))),
            Err(false) => return None,
        };
        let Some(next) = chunks.next().await else {
            return repair.finish().map(|rest| (Ok(rest), Err(false)));
        };
        match next {
            Ok(chunk) => {
                // Counted as repaired: what serde will read is what the bounds are about (an
                // invalid byte becomes three).
                let chunk = repair.feed(chunk);
                budget.feed(&chunk);
                if budget.bytes() > limit {
                    Some((Err(too_large()), Err(false)))
                } else if budget.exceeded() {
                    let bytes = budget.bytes();
                    Some((
                        Err(Box::new(TooManyElements { bytes }) as BoxError),
                        Err(false),
                    ))
                } else {
                    Some((Ok(chunk), Ok((chunks, budget, repair))))
                }
            }
            Err(error) => Some((Err(Box::new(error) as BoxError), Err(false))),
        }
    });
    // reqwest builds a `Response` only from an `http::Response`; axum re-exports the same `http`.
    let mut bounded = axum::http::Response::new(reqwest::Body::wrap_stream(body));
    *bounded.status_mut() = status;
    *bounded.version_mut() = version;
    *bounded.headers_mut() = headers;
    reqwest::Response::from(bounded)
}
