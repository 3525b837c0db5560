//! Prometheus metrics, one registry per node (so several nodes can share a
//! process in tests). Names and meanings are listed in docs/operations.md.

use prometheus::core::Collector;
use prometheus::{
    Encoder, GaugeVec, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Opts, Registry, TextEncoder,
};
use rustls::NamedGroup;
use sdk_orb::PartyId;

use crate::stats::report::{self, RateEstimate};
use crate::stats::{Comparison, OpenedHistograms};

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
    /// `ocelli_share_snapshot_batch`: the batch the latest share snapshot written was taken at.
    pub snapshot_batch: IntGauge,
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
    /// `ocelli_stats_bucket_count{population,comparison,bucket}`: the last opened period's
    /// noisy count per bucket of the 1D histograms (`bucket`: its lower edge).
    pub stats_bucket: IntGaugeVec,
    /// `ocelli_stats_joint_bucket_count{population,left_bucket,right_bucket}`: the same for
    /// the joint histogram.
    pub stats_joint_bucket: IntGaugeVec,
    /// `ocelli_stats_period`: the last opened period.
    pub stats_period: IntGauge,
    /// `ocelli_stats_pairs{population}`: pairs the last opened period counted.
    pub stats_pairs: IntGaugeVec,
    /// `ocelli_stats_false_match_rate{bound}`: estimate, low and high ends of its interval.
    pub stats_fmr: GaugeVec,
    /// `ocelli_stats_false_non_match_rate{bound}`: as for the false match rate.
    pub stats_fnmr: GaugeVec,
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
        let snapshot_batch = g(
            "share_snapshot_batch",
            "Batch the latest share snapshot written was taken at",
        );
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
        let igv = |name: &str, help: &str, labels: &[&str]| {
            let c = IntGaugeVec::new(Opts::new(name, help), labels).expect("static metric");
            register(Box::new(c.clone()));
            c
        };
        let stats_bucket = igv(
            "stats_bucket_count",
            "Noisy count per bucket of the last opened distance histograms",
            &["population", "comparison", "bucket"],
        );
        let stats_joint_bucket = igv(
            "stats_joint_bucket_count",
            "Noisy count per cell of the last opened joint (left by right) distance histograms",
            &["population", "left_bucket", "right_bucket"],
        );
        let stats_period = g("stats_period", "The last opened statistics period");
        let stats_pairs = igv(
            "stats_pairs",
            "Pairs the last opened statistics period counted",
            &["population"],
        );
        let rate = |name: &str, help: &str| {
            let c = GaugeVec::new(Opts::new(name, help), &["bound"]).expect("static metric");
            register(Box::new(c.clone()));
            c
        };
        let stats_fmr = rate(
            "stats_false_match_rate",
            "False match rate at the threshold from the last opened period (estimate, 95 % low and high)",
        );
        let stats_fnmr = rate(
            "stats_false_non_match_rate",
            "False non-match rate at the threshold from the last opened period (estimate, 95 % low and high)",
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
            snapshot_batch,
            load_ms,
            unauthenticated,
            evicted,
            oldest_pending_age,
            since_commit,
            peer_up,
            batches_aborted,
            tls_handshakes,
            cpu_engine,
            stats_bucket,
            stats_joint_bucket,
            stats_period,
            stats_pairs,
            stats_fmr,
            stats_fnmr,
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

    /// Exports an opened period: every bucket's noisy count as opened (negative ones too),
    /// the pairs per population, and the rate estimates (absent when there are too few pairs).
    /// Replaces the previous period's series, so changed edges leave none behind.
    pub fn record_opened_histograms(&self, h: &OpenedHistograms) {
        self.stats_bucket.reset();
        self.stats_joint_bucket.reset();
        let edge = |i: usize| h.edges.get(i).map(|e| format!("{e:.3}"));
        // The matching count has no bucket: the rate estimates below are read from it.
        for g in h
            .histograms
            .iter()
            .filter(|g| g.comparison != Comparison::Matching)
        {
            let population = report::population_name(g.population);
            for (k, &count) in g.counts.iter().enumerate() {
                if g.comparison == Comparison::Joint {
                    let e = h.buckets().max(1);
                    if let (Some(l), Some(r)) = (edge(k / e), edge(k % e)) {
                        self.stats_joint_bucket
                            .with_label_values(&[population, &l, &r])
                            .set(count);
                    }
                } else if let Some(b) = edge(k) {
                    self.stats_bucket
                        .with_label_values(&[population, report::comparison_name(g.comparison), &b])
                        .set(count);
                }
            }
        }
        self.stats_period
            .set(i64::try_from(h.period).unwrap_or(i64::MAX));
        for p in report::POPULATIONS {
            let pairs = i64::try_from(report::pairs(h, p)).unwrap_or(i64::MAX);
            self.stats_pairs
                .with_label_values(&[report::population_name(p)])
                .set(pairs);
        }
        let set = |gauge: &GaugeVec, estimate: Option<RateEstimate>| {
            gauge.reset();
            if let Some(r) = estimate {
                for (bound, v) in [("estimate", r.rate), ("low", r.low), ("high", r.high)] {
                    gauge.with_label_values(&[bound]).set(v);
                }
            }
        };
        set(&self.stats_fmr, report::false_match_rate(h));
        set(&self.stats_fnmr, report::false_non_match_rate(h));
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

    fn opened(period: u64, edges: Vec<f64>, impostor_joint: Vec<i64>) -> OpenedHistograms {
        use crate::stats::{Histogram, Population};
        OpenedHistograms {
            period,
            first_batch: 0,
            last_batch: 9,
            opened_at_unix_s: 0,
            threshold: edges[1],
            edges,
            epsilon: 1.0,
            delta: 1e-6,
            noise_variance: 0.0,
            impostor_pairs: 40,
            genuine_pairs: 0,
            reauthentication_pairs: 3,
            histograms: vec![
                Histogram {
                    population: Population::Impostor,
                    comparison: Comparison::Left,
                    counts: vec![-1, 4, 37],
                },
                Histogram {
                    population: Population::Impostor,
                    comparison: Comparison::Joint,
                    counts: impostor_joint,
                },
            ],
        }
    }

    fn series<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
        text.lines()
            .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
            .collect()
    }

    #[test]
    fn an_opened_period_is_exported_per_bucket_with_its_rates() {
        let metrics = Metrics::new(sdk_orb::PartyId::ALL[0]);
        // Edges 0.1, 0.3 (the threshold), 0.4; 2 of 40 impostor pairs with both eyes below.
        let joint = vec![2, 0, 0, 0, 30, 0, 0, 0, 8];
        metrics.record_opened_histograms(&opened(3, vec![0.1, 0.3, 0.4], joint));
        let text = metrics.render();
        let buckets = series(&text, "ocelli_stats_bucket_count");
        assert_eq!(
            buckets,
            [
                r#"ocelli_stats_bucket_count{bucket="0.100",comparison="left",population="impostor",party="0"} -1"#,
                r#"ocelli_stats_bucket_count{bucket="0.300",comparison="left",population="impostor",party="0"} 4"#,
                r#"ocelli_stats_bucket_count{bucket="0.400",comparison="left",population="impostor",party="0"} 37"#,
            ]
        );
        assert!(text.contains(
            r#"ocelli_stats_joint_bucket_count{left_bucket="0.300",population="impostor",right_bucket="0.300",party="0"} 30"#
        ));
        assert_eq!(series(&text, "ocelli_stats_joint_bucket_count").len(), 9);
        assert_eq!(
            series(&text, "ocelli_stats_period"),
            [r#"ocelli_stats_period{party="0"} 3"#]
        );
        assert!(text.contains(r#"ocelli_stats_pairs{population="impostor",party="0"} 40"#));
        assert!(text.contains(r#"ocelli_stats_pairs{population="reauthentication",party="0"} 3"#));
        assert!(text.contains(r#"ocelli_stats_false_match_rate{bound="estimate",party="0"} 0.05"#));
        assert_eq!(series(&text, "ocelli_stats_false_match_rate").len(), 3);
        // Three re-authentications are too few for a rate.
        assert!(series(&text, "ocelli_stats_false_non_match_rate").is_empty());

        // The next period with other edges replaces every bucket series.
        metrics.record_opened_histograms(&opened(4, vec![0.0, 0.2, 0.5], vec![0; 9]));
        let text = metrics.render();
        let buckets = series(&text, "ocelli_stats_bucket_count");
        assert_eq!(buckets.len(), 3);
        assert!(buckets.iter().all(|l| !l.contains("0.100")), "{buckets:?}");
        assert!(text.contains(r#"ocelli_stats_false_match_rate{bound="estimate",party="0"} 0"#));
        for name in [
            "ocelli_stats_bucket_count",
            "ocelli_stats_joint_bucket_count",
            "ocelli_stats_period",
            "ocelli_stats_pairs",
            "ocelli_stats_false_match_rate",
            "ocelli_stats_false_non_match_rate",
        ] {
            assert!(metrics.names().iter().any(|n| n == name), "{name}");
        }
    }
}
