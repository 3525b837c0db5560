//! Prometheus metrics, one registry per node (so several nodes can share a
//! process in tests). Names and meanings are listed in docs/operations.md.

use prometheus::core::Collector;
use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};
use rustls::NamedGroup;
use sdk_orb::PartyId;

/// A party as a label value (`party`, `peer`): its number.
fn label(party: PartyId) -> String {
    party.get().to_string()
}

/// A key exchange group as a label value (`group`): its IANA name, e.g. `X25519MLKEM768`.
fn group_label(group: NamedGroup) -> String {
    format!("{group:?}")
}

/// Counts the TLS handshakes one listening port completes (`ocelli_tls_handshakes_total`).
#[derive(Clone, Debug)]
pub struct HandshakeCounter {
    port: &'static str,
    total: IntCounterVec,
}

impl HandshakeCounter {
    /// One handshake that negotiated `group` (`none`: no key exchange, as in a resumption
    /// without one, which the node's configs do not offer).
    pub fn count(&self, group: Option<NamedGroup>) {
        let group = group.map_or_else(|| "none".to_owned(), group_label);
        self.total.with_label_values(&[self.port, &group]).inc();
    }
}

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
    /// `ocelli_oldest_pending_age_seconds`: age of the oldest pending request (0: none).
    pub oldest_pending_age: IntGauge,
    /// `ocelli_seconds_since_last_commit`: since a batch was last applied here (or start).
    pub since_commit: IntGauge,
    /// `ocelli_peer_up{peer}`: 1 while the peer answers pings.
    pub peer_up: IntGaugeVec,
    /// `ocelli_batches_aborted_total{cause}`: coordinator rounds that failed, by cause.
    pub batches_aborted: IntCounterVec,
    /// `ocelli_tls_handshakes_total{port,group}`: TLS handshakes completed on a listening port
    /// (`orb`, `peer`), by the key exchange group negotiated.
    pub tls_handshakes: IntCounterVec,
    /// `ocelli_cpu_engine_info{kernel,p,d,chunk}`: 1 for the CPU engine's kernel, tile shape
    /// and chunk length (none off the CPU engine).
    pub cpu_engine: IntGaugeVec,
    /// Every metric family name this registry exports (with the `ocelli_` prefix).
    names: Vec<String>,
}

/// The causes of `ocelli_batches_aborted_total`, all exported from start (at 0).
pub const ABORT_CAUSES: &[&str] = &[
    "peer_timeout",
    "peer_refused",
    "key_agreement",
    "evaluation",
    "panic",
    "deterministic",
    "apply",
    "unattested",
    "catch_up",
    "store",
];

impl Metrics {
    /// Registers all metrics in a fresh registry labelled with the party id.
    ///
    /// # Panics
    /// Never in practice: the metric definitions are static and valid.
    #[allow(clippy::expect_used)]
    pub fn new(party: PartyId) -> Self {
        let registry = Registry::new_custom(
            Some("ocelli".to_owned()),
            Some([("party".to_owned(), label(party))].into()),
        )
        .expect("static registry");
        let names = std::cell::RefCell::new(Vec::new());
        let register = |c: Box<dyn Collector>| {
            names
                .borrow_mut()
                .extend(c.desc().iter().map(|d| format!("ocelli_{}", d.fq_name)));
            registry.register(c).expect("unique metric");
        };
        let cv = |name: &str, help: &str, label: &str| {
            let c = IntCounterVec::new(Opts::new(name, help), &[label]).expect("static metric");
            register(Box::new(c.clone()));
            c
        };
        let g = |name: &str, help: &str| {
            let c = IntGauge::new(name, help).expect("static metric");
            register(Box::new(c.clone()));
            c
        };
        let h = |name: &str, help: &str, buckets: Vec<f64>| {
            let c = Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets))
                .expect("static metric");
            register(Box::new(c.clone()));
            c
        };
        let intake = cv("intake_total", "Submit calls by outcome", "status");
        let results = cv("results_total", "Results finalised by status", "status");
        // Exported at 0 from start, so the alert on quarantined requests sees the first one.
        results.with_label_values(&["quarantined"]);
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
        register(Box::new(comparisons.clone()));
        let enrolled = g("store_enrolled", "Enrolled entries");
        let pending = g("store_pending", "Requests waiting for a batch");
        let store_bytes = g("store_bytes", "Store file size in bytes");
        let last_batch = g("last_applied_batch", "Last batch applied");
        let ready = g("ready", "1 when the node is ready");
        let load_ms = IntCounter::new("share_load_milliseconds_total", "Time loading shares")
            .expect("static metric");
        register(Box::new(load_ms.clone()));
        let unauthenticated = IntGaugeVec::new(
            Opts::new(
                "unauthenticated_connections",
                "Connections not authenticated yet, by port",
            ),
            &["port"],
        )
        .expect("static metric");
        register(Box::new(unauthenticated.clone()));
        let evicted = cv(
            "unauthenticated_evicted_total",
            "Unauthenticated connections closed to admit a newer one over a cap",
            "port",
        );
        let oldest_pending_age = g(
            "oldest_pending_age_seconds",
            "Age of the oldest pending request in seconds (0: none)",
        );
        let since_commit = g(
            "seconds_since_last_commit",
            "Seconds since a batch was last applied here (or since start)",
        );
        let peer_up = IntGaugeVec::new(
            Opts::new("peer_up", "1 while the peer answers pings"),
            &["peer"],
        )
        .expect("static metric");
        register(Box::new(peer_up.clone()));
        let batches_aborted = cv(
            "batches_aborted_total",
            "Coordinator batch rounds that failed, by cause",
            "cause",
        );
        for cause in ABORT_CAUSES {
            batches_aborted.with_label_values(&[cause]);
        }
        let tls_handshakes = IntCounterVec::new(
            Opts::new(
                "tls_handshakes_total",
                "TLS handshakes completed on a listening port, by key exchange group",
            ),
            &["port", "group"],
        )
        .expect("static metric");
        register(Box::new(tls_handshakes.clone()));
        for port in ["orb", "peer"] {
            for group in [NamedGroup::X25519MLKEM768, NamedGroup::X25519] {
                tls_handshakes.with_label_values(&[port, &group_label(group)]);
            }
        }
        let cpu_engine = IntGaugeVec::new(
            Opts::new(
                "cpu_engine_info",
                "1 for the CPU engine's kernel, tile shape (p query by d database rows) and chunk",
            ),
            &["kernel", "p", "d", "chunk"],
        )
        .expect("static metric");
        register(Box::new(cpu_engine.clone()));
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
            oldest_pending_age,
            since_commit,
            peer_up,
            batches_aborted,
            tls_handshakes,
            cpu_engine,
            names: names.into_inner(),
        }
    }

    /// The handshake counter of the port named `port` (`orb`, `peer`).
    pub fn tls_handshakes(&self, port: &'static str) -> HandshakeCounter {
        HandshakeCounter {
            port,
            total: self.tls_handshakes.clone(),
        }
    }

    /// Every metric family name exported, with the `ocelli_` prefix (histograms add
    /// `_bucket`, `_sum` and `_count` in the exposition).
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Exports the per-peer series from start, so alerts see them at 0 before any event.
    pub fn init_peers(&self, peers: impl IntoIterator<Item = PartyId>) {
        for p in peers {
            let p = label(p);
            self.peer_up.with_label_values(&[&p]).set(0);
            self.peer_errors.with_label_values(&[&p]);
            self.key_agreement_failures.with_label_values(&[&p]);
        }
    }

    /// Exports the CPU engine's kernel, tile shape and chunk length.
    pub fn cpu_tuning(&self, tuning: ocelli_cpu::Tuning) {
        let (p, d) = tuning.tile.shape();
        let labels = [
            tuning.tile.kernel().name(),
            &p.to_string(),
            &d.to_string(),
            &tuning.chunk.to_string(),
        ];
        self.cpu_engine.reset();
        self.cpu_engine.with_label_values(&labels).set(1);
    }

    /// Counts a failed coordinator round by `cause` (one of [`ABORT_CAUSES`]).
    pub fn batch_aborted(&self, cause: &str) {
        self.batches_aborted.with_label_values(&[cause]).inc();
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
    pub fn peer_error(&self, party: PartyId) {
        self.peer_errors.with_label_values(&[&label(party)]).inc();
    }

    /// Counts a failed MPC key agreement with `party`.
    pub fn key_agreement_failure(&self, party: PartyId) {
        self.key_agreement_failures
            .with_label_values(&[&label(party)])
            .inc();
    }

    /// Sets `ocelli_peer_up{peer}`: whether the last ping of `party` was answered.
    pub fn set_peer_up(&self, party: PartyId, up: bool) {
        self.peer_up
            .with_label_values(&[&label(party)])
            .set(i64::from(up));
    }

    /// Current value of `ocelli_intake_total{status}`.
    pub fn intake_count(&self, status: &str) -> u64 {
        self.intake.with_label_values(&[status]).get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_engine_info_names_the_kernel_tile_and_chunk_in_use() {
        let metrics = Metrics::new(sdk_orb::PartyId::ALL[1]);
        let scalar = ocelli_cpu::Tuning::default_for(ocelli_cpu::Kernel::Scalar);
        metrics.cpu_tuning(ocelli_cpu::Tuning {
            chunk: 4096,
            ..scalar
        });
        metrics.cpu_tuning(scalar);
        let text = metrics.render();
        let series: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("ocelli_cpu_engine_info{"))
            .collect();
        assert_eq!(
            series,
            [r#"ocelli_cpu_engine_info{chunk="2048",d="4",kernel="scalar",p="8",party="1"} 1"#]
        );
        assert!(metrics
            .names()
            .iter()
            .any(|n| n == "ocelli_cpu_engine_info"));
    }
}
