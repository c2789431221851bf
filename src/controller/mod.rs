//! Controllers: one module per custom resource, each a thin async driver over pure steps.
//!
//! - [`cluster`]: registers a slurmrestd client (and its poller) per `Cluster`, reports whether
//!   it works in the Cluster's status.
//! - [`nodeset`]: slurmd pods as dynamic Slurm nodes; scale-in drains in Slurm before deleting.
//!
//! Shared here: per-object requeue backoff ([`Backoffs`]) and small helpers every driver needs.

/// Reconciles one controller runs at once. kube's default is unbounded: when its cache fills,
/// every object's reconcile starts together, and 10 000 SlurmJobs in flight at once held ~37 KB
/// each of future state (the operator binary's peak memory, hack/bench.sh).
pub const MAX_CONCURRENT_RECONCILES: u16 = 16;

/// `kubectl apply`'s copy of the whole object as last applied (client-side apply).
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops from an object what no controller here reads, before the cache keeps it: the
/// `managedFields` (a third of a small object) and [`LAST_APPLIED`] (a second copy of the
/// spec, a SlurmJob's script included). The caches are never written back whole.
pub fn trim_for_cache<K: ResourceExt>(obj: &mut K) {
    obj.managed_fields_mut().clear();
    obj.annotations_mut().remove(LAST_APPLIED);
}

pub mod cluster;
pub mod context;
pub mod nodeset;
pub mod slurmjob;

#[cfg(test)]
pub(crate) mod test_support;

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::runtime::controller::Action;
use kube::runtime::finalizer;
use kube::{Resource, ResourceExt};
use tracing::{Instrument, info_span};

use crate::controller::context::Context;

/// Per-object exponential backoff for failed reconciles: the first failure requeues after
/// [`Backoffs::MIN`], each further one doubles the delay up to [`Backoffs::MAX`]; a success
/// resets it. Keyed by controller and object, so a failing object never slows down another.
///
/// kube's controller has no per-object backoff of its own (`error_policy` returns one fixed
/// `Action`), and a fixed short requeue is a hot loop against an unreachable slurmrestd.
#[derive(Debug, Default)]
pub struct Backoffs {
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoffs {
    /// Delay after the first failure.
    pub const MIN: Duration = Duration::from_secs(2);
    /// Longest delay between two attempts.
    pub const MAX: Duration = Duration::from_secs(300);

    /// The key for one object of one controller.
    pub fn key(controller: &str, namespace: &str, name: &str) -> String {
        format!("{controller}/{namespace}/{name}")
    }

    /// Record a failure of `key`; returns how long to wait before the next attempt.
    pub fn next(&self, key: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let count = failures.entry(key.to_owned()).or_default();
        let delay = Self::delay(*count);
        *count = count.saturating_add(1);
        delay
    }

    /// Forget the failures of `key` (after a success, or when the object is gone).
    pub fn reset(&self, key: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        failures.remove(key);
    }

    /// The delay after `previous` failures: MIN * 2^previous, at most MAX.
    fn delay(previous: u32) -> Duration {
        let factor = 1u32.checked_shl(previous.min(16)).unwrap_or(u32::MAX);
        Self::MIN.saturating_mul(factor).min(Self::MAX)
    }
}

/// Formats an error with its `source()` chain: `outer: inner: innermost`. For logs and
/// human-readable status messages; metric labels and reasons use the errors' categories.
/// A source whose text its parent already shows (some libraries print their sources
/// themselves) is not repeated.
pub struct Chain<'a>(pub &'a (dyn std::error::Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parent = self.0.to_string();
        f.write_str(&parent)?;
        let mut source = self.0.source();
        while let Some(error) = source {
            let text = error.to_string();
            if !parent.contains(&text) {
                write!(f, ": {text}")?;
            }
            parent = text;
            source = error.source();
        }
        Ok(())
    }
}

/// One reconcile as every controller runs it: nothing at all on a replica without the leader
/// Lease (gaining it reconciles everything again), else `work` in a tracing span with the
/// object's name and namespace, timed into the reconcile metrics.
pub async fn reconcile_as_leader<K, E>(
    controller: &'static str,
    object: &K,
    ctx: &Context,
    work: impl Future<Output = Result<Action, E>>,
) -> Result<Action, E>
where
    K: Resource,
{
    if !ctx.leadership.is_leader() {
        return Ok(Action::await_change());
    }
    let span = info_span!(
        "reconcile",
        controller,
        name = %object.name_any(),
        namespace = object.namespace().as_deref().unwrap_or_default(),
    );
    let started = Instant::now();
    let result = work.instrument(span).await;
    ctx.metrics.reconciled(controller, started.elapsed());
    result
}

/// A controller error that can say what went wrong around kube's finalizer helper.
pub trait FinalizerFailure: Sized {
    fn add_finalizer(error: kube::Error) -> Self;
    fn remove_finalizer(error: kube::Error) -> Self;
    fn missing_metadata(what: &'static str) -> Self;

    /// The controller's own error, out of the finalizer helper's wrapping.
    fn from_finalizer(error: finalizer::Error<Self>) -> Self
    where
        Self: std::error::Error + 'static,
    {
        match error {
            finalizer::Error::ApplyFailed(e) | finalizer::Error::CleanupFailed(e) => e,
            finalizer::Error::AddFinalizer(e) => Self::add_finalizer(e),
            finalizer::Error::RemoveFinalizer(e) => Self::remove_finalizer(e),
            finalizer::Error::UnnamedObject => Self::missing_metadata("name"),
            finalizer::Error::InvalidFinalizer => Self::missing_metadata("valid finalizer"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_and_resets() {
        let backoffs = Backoffs::default();
        let key = Backoffs::key("cluster", "ns", "a");
        let delays: Vec<_> = (0..10).map(|_| backoffs.next(&key)).collect();
        assert_eq!(delays[0], Backoffs::MIN);
        assert_eq!(delays[1], Backoffs::MIN * 2);
        assert_eq!(delays[2], Backoffs::MIN * 4);
        assert!(delays.windows(2).all(|w| w[0] <= w[1]), "{delays:?}");
        assert_eq!(*delays.last().unwrap(), Backoffs::MAX);
        // Another object is not affected.
        assert_eq!(
            backoffs.next(&Backoffs::key("cluster", "ns", "b")),
            Backoffs::MIN
        );
        backoffs.reset(&key);
        assert_eq!(backoffs.next(&key), Backoffs::MIN);
    }

    #[test]
    fn backoff_never_overflows() {
        assert_eq!(Backoffs::delay(u32::MAX), Backoffs::MAX);
    }

    #[test]
    fn chain_shows_every_source() {
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] std::io::Error);
        let error = Outer(std::io::Error::other("inner"));
        assert_eq!(Chain(&error).to_string(), "outer: inner");

        #[derive(Debug, thiserror::Error)]
        #[error("talkative: {0}")]
        struct Talkative(#[source] std::io::Error);
        let error = Outer(std::io::Error::other(Talkative(std::io::Error::other(
            "root",
        ))));
        assert_eq!(Chain(&error).to_string(), "outer: talkative: root");
    }
}
