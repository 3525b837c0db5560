//! Prometheus metrics, one registry per node (so several nodes can share a
//! process in tests). Names and meanings are listed in docs/operations.md.

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

/// The node's metrics.
#[derive(Clone, Debug)]
pub struct Metrics {
    registry: Registry,
    /// `ocelli_intake_total{status}`: Submit calls by outcome.
    pub intake: IntCounterVec,
    /// `ocelli_results_total{status}`: results finalised by status.
    pub results: IntCounterVec,
    /// `ocelli_batches_total{outcome}`: batch rounds.
    pub batches: IntCounterVec,
    /// `ocelli_batch_latency_seconds`: proposal to durable results.
    pub batch_latency: Histogram,
    /// `ocelli_batch_size`: requests per committed batch.
    pub batch_size: Histogram,
    /// `ocelli_evaluation_seconds`: the matching pipeline's time per batch.
    pub evaluation_seconds: Histogram,
    /// `ocelli_comparisons_total`: (query rotation, enrolled iris) pairs compared.
    pub comparisons: IntCounter,
    /// `ocelli_peer_errors_total{peer}`: failed node-to-node calls.
    pub peer_errors: IntCounterVec,
    /// `ocelli_mpc_key_agreement_failures_total{peer}`: MPC sessions whose pairwise keys a
    /// peer did not confirm.
    pub key_agreement_failures: IntCounterVec,
    /// `ocelli_store_enrolled`: enrolled entries.
    pub enrolled: IntGauge,
    /// `ocelli_store_pending`: requests waiting for a batch.
    pub pending: IntGauge,
    /// `ocelli_store_bytes`: store file size.
    pub store_bytes: IntGauge,
    /// `ocelli_last_applied_batch`: last batch applied.
    pub last_batch: IntGauge,
    /// `ocelli_ready`: 1 when ready.
    pub ready: IntGauge,
    /// `ocelli_share_load_seconds_total`: time spent loading shares at start (ms).
    pub load_ms: IntCounter,
    /// `ocelli_unauthenticated_connections{port}`: connections not authenticated yet, by port
    /// (`orb`, `peer`).
    pub unauthenticated: IntGaugeVec,
    /// `ocelli_unauthenticated_evicted_total{port}`: unauthenticated connections closed to admit
    /// a newer one over a cap.
    pub evicted: IntCounterVec,
}

impl Metrics {
    /// Registers all metrics in a fresh registry labelled with the party id.
    ///
    /// # Panics
    /// Never in practice: the metric definitions are static and valid.
    #[allow(clippy::expect_used)]
    pub fn new(party: u8) -> Self {
        let registry = Registry::new_custom(
            Some("ocelli".to_owned()),
            Some([("party".to_owned(), party.to_string())].into()),
        )
        .expect("static registry");
        let cv = |name: &str, help: &str, label: &str| {
            let c = IntCounterVec::new(Opts::new(name, help), &[label]).expect("static metric");
            registry
                .register(Box::new(c.clone()))
                .expect("unique metric");
            c
        };
        let g = |name: &str, help: &str| {
            let c = IntGauge::new(name, help).expect("static metric");
            registry
                .register(Box::new(c.clone()))
                .expect("unique metric");
            c
        };
        let h = |name: &str, help: &str, buckets: Vec<f64>| {
            let c = Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets))
                .expect("static metric");
            registry
                .register(Box::new(c.clone()))
                .expect("unique metric");
            c
        };
        let intake = cv("intake_total", "Submit calls by outcome", "status");
        let results = cv("results_total", "Results finalised by status", "status");
        let batches = cv("batches_total", "Batch rounds by outcome", "outcome");
        let peer_errors = cv("peer_errors_total", "Failed node-to-node calls", "peer");
        let key_agreement_failures = cv(
            "mpc_key_agreement_failures_total",
            "MPC sessions whose pairwise keys a peer did not confirm",
            "peer",
        );
        let batch_latency = h(
            "batch_latency_seconds",
            "Batch proposal to durable results",
            prometheus::exponential_buckets(0.001, 2.0, 16).unwrap_or_default(),
        );
        let batch_size = h(
            "batch_size",
            "Requests per committed batch",
            prometheus::exponential_buckets(1.0, 2.0, 12).unwrap_or_default(),
        );
        let evaluation_seconds = h(
            "evaluation_seconds",
            "Matching pipeline time per batch",
            prometheus::exponential_buckets(0.001, 2.0, 18).unwrap_or_default(),
        );
        let comparisons = IntCounter::new(
            "comparisons_total",
            "(query rotation, enrolled iris) pairs compared in MPC",
        )
        .expect("static metric");
        registry
            .register(Box::new(comparisons.clone()))
            .expect("unique metric");
        let enrolled = g("store_enrolled", "Enrolled entries");
        let pending = g("store_pending", "Requests waiting for a batch");
        let store_bytes = g("store_bytes", "Store file size in bytes");
        let last_batch = g("last_applied_batch", "Last batch applied");
        let ready = g("ready", "1 when the node is ready");
        let load_ms = IntCounter::new("share_load_milliseconds_total", "Time loading shares")
            .expect("static metric");
        registry
            .register(Box::new(load_ms.clone()))
            .expect("unique metric");
        let unauthenticated = IntGaugeVec::new(
            Opts::new(
                "unauthenticated_connections",
                "Connections not authenticated yet, by port",
            ),
            &["port"],
        )
        .expect("static metric");
        registry
            .register(Box::new(unauthenticated.clone()))
            .expect("unique metric");
        let evicted = cv(
            "unauthenticated_evicted_total",
            "Unauthenticated connections closed to admit a newer one over a cap",
            "port",
        );
        Self {
            registry,
            intake,
            results,
            batches,
            batch_latency,
            batch_size,
            evaluation_seconds,
            comparisons,
            peer_errors,
            key_agreement_failures,
            enrolled,
            pending,
            store_bytes,
            last_batch,
            ready,
            load_ms,
            unauthenticated,
            evicted,
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }

    /// Counts a batch round by `outcome` (`ocelli_batches_total{outcome}`).
    pub fn batch(&self, outcome: &str) {
        self.batches.with_label_values(&[outcome]).inc();
    }

    /// Counts a failed call to `party`.
    pub fn peer_error(&self, party: u8) {
        self.peer_errors
            .with_label_values(&[&party.to_string()])
            .inc();
    }

    /// Counts a failed MPC key agreement with `party`.
    pub fn key_agreement_failure(&self, party: u8) {
        self.key_agreement_failures
            .with_label_values(&[&party.to_string()])
            .inc();
    }

    /// Current value of `ocelli_intake_total{status}`.
    pub fn intake_count(&self, status: &str) -> u64 {
        self.intake.with_label_values(&[status]).get()
    }
}
