//! Prometheus metrics. Labels are static and low-cardinality: controller names, poll kinds,
//! slurmrestd operation ids and error categories — never object names or free text.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::slurm::RequestObserver;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabel {
    controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    controller: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PollLabel {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    operation: &'static str,
    /// "2xx", "4xx", "5xx", or "error" when no response came back.
    code: &'static str,
}

/// All metrics of the process, registered once.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ControllerLabel, Counter>,
    reconcile_errors: Family<ErrorLabels, Counter>,
    reconcile_duration: Family<ControllerLabel, Histogram>,
    poll_duration: Family<PollLabel, Histogram>,
    poll_errors: Family<PollLabel, Counter>,
    requests: Family<RequestLabels, Histogram>,
    pollers: Gauge,
    deferred: Family<ControllerLabel, Counter>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

fn latency_histogram() -> Histogram {
    // 1 ms .. ~16 s
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("slurm_operator");
        let reconciles = Family::<ControllerLabel, Counter>::default();
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        let reconcile_duration = Family::<ControllerLabel, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let poll_duration = Family::<PollLabel, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        let poll_errors = Family::<PollLabel, Counter>::default();
        let requests = Family::<RequestLabels, Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        registry.register(
            "reconciles",
            "Reconciles run, by controller",
            reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconciles that failed, by controller and error category",
            reconcile_errors.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Reconcile duration, by controller",
            reconcile_duration.clone(),
        );
        registry.register(
            "poll_duration_seconds",
            "Duration of one Slurm poll, by kind (jobs, nodes)",
            poll_duration.clone(),
        );
        registry.register(
            "poll_errors",
            "Slurm polls that failed, by kind",
            poll_errors.clone(),
        );
        registry.register(
            "slurmrestd_request_duration_seconds",
            "slurmrestd request latency, by operation and status class",
            requests.clone(),
        );
        let pollers = Gauge::default();
        registry.register(
            "pollers",
            "Slurm pollers running: one per slurmrestd and credentials, however many SlurmClusters share it",
            pollers.clone(),
        );
        let deferred = Family::<ControllerLabel, Counter>::default();
        registry.register(
            "reconciles_deferred",
            "Reconciles requeued because their Slurm cluster had no free request slot, by controller",
            deferred.clone(),
        );
        Self {
            registry,
            reconciles,
            reconcile_errors,
            reconcile_duration,
            poll_duration,
            poll_errors,
            requests,
            pollers,
            deferred,
        }
    }
}

impl Metrics {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn reconciled(&self, controller: &'static str, elapsed: Duration) {
        self.reconciles
            .get_or_create(&ControllerLabel { controller })
            .inc();
        self.reconcile_duration
            .get_or_create(&ControllerLabel { controller })
            .observe(elapsed.as_secs_f64());
    }

    pub fn reconcile_failed(&self, controller: &'static str, reason: &'static str) {
        self.reconcile_errors
            .get_or_create(&ErrorLabels { controller, reason })
            .inc();
    }

    pub fn polled(&self, kind: &'static str, elapsed: Duration, ok: bool) {
        self.poll_duration
            .get_or_create(&PollLabel { kind })
            .observe(elapsed.as_secs_f64());
        if !ok {
            self.poll_errors.get_or_create(&PollLabel { kind }).inc();
        }
    }

    /// How many pollers run now.
    pub fn set_pollers(&self, count: usize) {
        self.pollers.set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// A reconcile of `controller` found its cluster's request slots all taken.
    pub fn deferred(&self, controller: &'static str) {
        self.deferred
            .get_or_create(&ControllerLabel { controller })
            .inc();
    }

    /// The text exposition format for `/metrics`.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

impl RequestObserver for Metrics {
    fn observe(&self, operation: &'static str, status: Option<u16>, elapsed: Duration) {
        let code = match status {
            Some(200..=299) => "2xx",
            Some(300..=399) => "3xx",
            Some(400..=499) => "4xx",
            Some(_) => "5xx",
            None => "error",
        };
        self.requests
            .get_or_create(&RequestLabels { operation, code })
            .observe(elapsed.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_exposed_with_static_labels() {
        let metrics = Metrics::new();
        metrics.reconciled("cluster", Duration::from_millis(3));
        metrics.reconcile_failed("cluster", "SecretNotFound");
        metrics.polled("jobs", Duration::from_millis(8), false);
        metrics.observe("slurm_v0042_get_diag", Some(511), Duration::from_millis(2));
        metrics.observe("slurm_v0042_get_diag", None, Duration::from_millis(2));
        let text = metrics.encode().unwrap();
        assert!(
            text.contains("slurm_operator_reconciles_total{controller=\"cluster\"} 1"),
            "{text}"
        );
        assert!(text.contains("slurm_operator_reconcile_errors_total{controller=\"cluster\",reason=\"SecretNotFound\"} 1"), "{text}");
        assert!(
            text.contains("slurm_operator_poll_errors_total{kind=\"jobs\"} 1"),
            "{text}"
        );
        assert!(text.contains("slurm_operator_slurmrestd_request_duration_seconds_count{operation=\"slurm_v0042_get_diag\",code=\"5xx\"} 1"), "{text}");
        assert!(text.contains("code=\"error\""), "{text}");
    }
}
