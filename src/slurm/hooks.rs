//! The generated client's hooks: credentials on every request, one tracing span and one latency
//! observation per request, the HTTP status kept for the facade, and a bounded body.

use std::sync::Arc;
use std::time::Instant;

use progenitor_client::{ClientHooks, Error as ProgenitorError, OperationInfo};
use tracing::Instrument;

use super::auth;
use super::generated::Client;
use super::transport::{Transport, bounded, record, redirect_target};

impl ClientHooks<Arc<Transport>> for Client {
    async fn pre<E>(
        &self,
        request: &mut reqwest::Request,
        _info: &OperationInfo,
    ) -> Result<(), ProgenitorError<E>> {
        let credentials = progenitor_client::ClientInfo::inner(self).credentials();
        match auth::authorize(&credentials, request).await {
            Ok(()) => Ok(()),
            Err(error) => {
                let message = error.to_string();
                record(|exchange| exchange.auth_error = Some(error));
                Err(ProgenitorError::Custom(message))
            }
        }
    }

    async fn exec(
        &self,
        request: reqwest::Request,
        info: &OperationInfo,
    ) -> reqwest::Result<reqwest::Response> {
        let span = tracing::debug_span!(
            "slurmrestd",
            operation = info.operation_id,
            method = %request.method(),
            path = request.url().path(),
            status = tracing::field::Empty,
            latency_ms = tracing::field::Empty,
        );
        let started = Instant::now();
        let result = progenitor_client::ClientInfo::client(self)
            .execute(request)
            .instrument(span.clone())
            .await;
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
        let transport = progenitor_client::ClientInfo::inner(self);
        if let Some(observer) = &transport.observer {
            observer.observe(info.operation_id, status, elapsed);
        }
        result.map(|response| bounded(response, transport.max_response_bytes, info.operation_id))
    }
}
