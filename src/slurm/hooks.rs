//! The generated client's hooks: credentials and the call's timeout on every request, one
//! tracing span and one latency observation per request, the HTTP status kept for the facade,
//! and a bounded body.

use std::sync::Arc;
use std::time::Instant;

use progenitor_client::{ClientHooks, Error as ProgenitorError, OperationInfo};
use tracing::Instrument;

use super::auth;
use super::generated;
use super::transport::{self, Transport, bounded, record, redirect_target};

/// The same hooks for every version's generated client.
macro_rules! hooks {
    ($($module:ident),* $(,)?) => {$(
        impl ClientHooks<Arc<Transport>> for generated::$module::Client {
            async fn pre<E>(
                &self,
                request: &mut reqwest::Request,
                _info: &OperationInfo,
            ) -> Result<(), ProgenitorError<E>> {
                pre(progenitor_client::ClientInfo::inner(self), request).await
            }

            async fn exec(
                &self,
                request: reqwest::Request,
                info: &OperationInfo,
            ) -> reqwest::Result<reqwest::Response> {
                exec(
                    progenitor_client::ClientInfo::client(self),
                    progenitor_client::ClientInfo::inner(self),
                    request,
                    info,
                )
                .await
            }
        }
    )*};
}

hooks!(v0_0_40, v0_0_41, v0_0_42, v0_0_43, v0_0_44, v0_0_45);

/// Credentials and the call's timeout on the request.
async fn pre<E>(
    transport: &Transport,
    request: &mut reqwest::Request,
) -> Result<(), ProgenitorError<E>> {
    {
        if let Some(timeout) = transport::timeout() {
            *request.timeout_mut() = Some(timeout);
        }
        let credentials = transport.credentials();
        match auth::authorize(&credentials, request).await {
            Ok(()) => Ok(()),
            Err(error) => {
                let message = error.to_string();
                record(|exchange| exchange.auth_error = Some(error));
                Err(ProgenitorError::Custom(message))
            }
        }
    }
}

/// The request, in a span, with its status, latency and a bounded body recorded.
async fn exec(
    http: &reqwest::Client,
    transport: &Transport,
    request: reqwest::Request,
    info: &OperationInfo,
) -> reqwest::Result<reqwest::Response> {
    {
        let span = tracing::debug_span!(
            "slurmrestd",
            operation = info.operation_id,
            method = %request.method(),
            path = request.url().path(),
            status = tracing::field::Empty,
            latency_ms = tracing::field::Empty,
        );
        let started = Instant::now();
        let result = http.execute(request).instrument(span.clone()).await;
        let elapsed = started.elapsed();
        let status = result.as_ref().ok().map(|r| r.status().as_u16());
        span.record("latency_ms", elapsed.as_secs_f64() * 1000.0);
        match (&result, status) {
            (_, Some(status)) => {
                span.record("status", status);
                span.in_scope(|| tracing::debug!("slurmrestd answered"));
            }
            (Err(error), None) => {
                span.in_scope(|| tracing::debug!(%error, "slurmrestd request failed"))
            }
            (Ok(_), None) => {}
        }
        let redirect_to = result.as_ref().ok().and_then(redirect_target);
        if let Some(location) = &redirect_to {
            span.in_scope(|| {
                tracing::debug!(location, "slurmrestd's endpoint redirects; not followed")
            });
        }
        record(|exchange| {
            exchange.status = status;
            exchange.redirect_to = redirect_to;
        });
        if let Some(observer) = &transport.observer {
            observer.observe(info.operation_id, status, elapsed);
        }
        result.map(|response| bounded(response, transport.max_response_bytes, info.operation_id))
    }
}
