//! Node configuration: a TOML file, then `OCELLI_*` environment overrides.
//!
//! The structs below are the one definition of the file's format: the overrides
//! (`OCELLI_<SECTION>_<KEY>`, see [`env_overrides`]) are derived from their fields, and a
//! written config ([`NodeConfig::to_toml`]) is their serialization.

mod schema;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sdk_orb::PartyId;
use serde::{Deserialize, Serialize};

pub use schema::{Key, Kind};

/// The largest message between two nodes, in bytes: a gRPC message of the peer service, or
/// an MPC link's frame (`crate::links`), which carries one round's message whole.
pub const PEER_MESSAGE_CAP: usize = 64 << 20;

/// What an MPC frame adds to a round's message (its 4-byte length), with room to spare.
pub const MPC_FRAME_OVERHEAD: usize = 1024;

/// The largest `matching.max_pass_comparisons` whose rounds fit in one peer message.
pub fn max_pass_comparisons_allowed() -> usize {
    ocelli_mpc::pipeline::max_pass_comparisons_within(PEER_MESSAGE_CAP - MPC_FRAME_OVERHEAD)
}

/// Everything a node needs to start. Paths are relative to the config file's
/// directory unless absolute.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    /// This node's party id, 0, 1 or 2 (another number does not parse).
    pub party_id: PartyId,
    /// Directory of the redb store.
    pub data_dir: PathBuf,
    /// Listen addresses.
    pub listen: ListenConfig,
    /// TLS material.
    pub tls: TlsConfig,
    /// Identity keys and the orb allow-list.
    pub keys: KeysConfig,
    /// The two other parties.
    pub peers: Vec<PeerConfig>,
    /// Envelope intake limits.
    #[serde(default)]
    pub intake: IntakeConfig,
    /// Which envelope versions intake accepts.
    #[serde(default)]
    pub envelope: EnvelopeConfig,
    /// Batch formation.
    #[serde(default)]
    pub batch: BatchConfig,
    /// Matching pipeline.
    #[serde(default)]
    pub matching: MatchingConfig,
    /// Where the store lives (default: redb in `data_dir`).
    #[serde(default)]
    pub store: StoreConfig,
    /// What callers may hold open: connections and result streams.
    #[serde(default)]
    pub connections: ConnectionsConfig,
    /// Liveness and readiness bounds, peer probing.
    #[serde(default)]
    pub health: HealthConfig,
    /// Distance statistics: histograms computed in MPC, opened as noisy counts per period.
    #[serde(default)]
    pub stats: StatsConfig,
}

/// When `/livez` calls the batch loop stuck, and how often peers are probed for `/readyz`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthConfig {
    /// Stuck when the oldest pending request is older than this while both peers answer,
    /// seconds. Best above `batch.request_timeout_ms` (a warning at start otherwise): a request
    /// one node lacks waits that long for its time-out without anything being stuck.
    pub max_pending_age_s: u64,
    /// Stuck when no batch has committed for this long while requests wait, peers up or not,
    /// seconds.
    pub max_commit_gap_s: u64,
    /// Pause between pings of each peer, milliseconds.
    pub peer_probe_interval_ms: u64,
}

impl Default for HealthConfig {
    fn default() -> Self {
        Self {
            max_pending_age_s: 300,
            max_commit_gap_s: 900,
            peer_probe_interval_ms: 5_000,
        }
    }
}

impl HealthConfig {
    /// `peer_probe_interval_ms` as a duration.
    pub fn peer_probe_interval(&self) -> Duration {
        Duration::from_millis(self.peer_probe_interval_ms)
    }
}

/// What callers may hold open. A connection is unauthenticated from its accept until its TLS
/// handshake has verified a configured client certificate; on the orb port, one that completed
/// the handshake without a certificate stays unauthenticated until it closes, and on the
/// metrics port every connection does.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectionsConfig {
    /// Unauthenticated connections per port (orb, peer, metrics). A new one over the cap closes
    /// the oldest of the source address that holds the most.
    pub max_unauthenticated: usize,
    /// Unauthenticated connections per port from one source address. A new one over the cap
    /// closes that address's oldest.
    pub max_unauthenticated_per_address: usize,
    /// How long a connection may stay unauthenticated, ms: its TLS handshake, and on the orb
    /// port a connection without a client certificate (closed sooner, once a call is refused).
    pub unauthenticated_timeout_ms: u64,
    /// HTTP/2 keep-alive pings on authenticated connections (orb and peer ports), ms; 0: none.
    pub keepalive_interval_ms: u64,
    /// A connection whose keep-alive ping goes unanswered this long is closed, ms.
    pub keepalive_timeout_ms: u64,
    /// Orb port: an authenticated connection this old is asked to close (HTTP/2 GOAWAY: calls
    /// in flight finish, the client connects again), seconds; 0: never.
    pub max_orb_connection_age_s: u64,
    /// `StreamResults` calls one orb client (gateway or results consumer) may hold open.
    pub max_result_streams_per_client: usize,
}

impl Default for ConnectionsConfig {
    fn default() -> Self {
        Self {
            max_unauthenticated: 256,
            max_unauthenticated_per_address: 16,
            unauthenticated_timeout_ms: 5_000,
            keepalive_interval_ms: 30_000,
            keepalive_timeout_ms: 10_000,
            max_orb_connection_age_s: 3_600,
            max_result_streams_per_client: 256,
        }
    }
}

impl ConnectionsConfig {
    /// `unauthenticated_timeout_ms` as a duration.
    pub fn unauthenticated_timeout(&self) -> Duration {
        Duration::from_millis(self.unauthenticated_timeout_ms)
    }

    /// `keepalive_interval_ms` as a duration, if pings are on.
    pub fn keepalive_interval(&self) -> Option<Duration> {
        (self.keepalive_interval_ms > 0).then(|| Duration::from_millis(self.keepalive_interval_ms))
    }

    /// `keepalive_timeout_ms` as a duration.
    pub fn keepalive_timeout(&self) -> Duration {
        Duration::from_millis(self.keepalive_timeout_ms)
    }

    /// `max_orb_connection_age_s` as a duration, if connections age out.
    pub fn max_orb_connection_age(&self) -> Option<Duration> {
        (self.max_orb_connection_age_s > 0)
            .then(|| Duration::from_secs(self.max_orb_connection_age_s))
    }
}

/// The share snapshot's file name in `data_dir`.
pub const SHARE_SNAPSHOT_FILE: &str = "shares.snapshot";

/// The store backend: redb in `data_dir` unless `url` names a PostgreSQL server.
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `postgres://user:password@host:port/database`; unset: the redb store.
    pub url: Option<String>,
    /// Schema holding this node's tables (several nodes can share a database).
    pub schema: String,
    /// Connections to the server.
    pub pool_size: usize,
    /// TLS to the server; unset: plaintext, allowed only to loopback hosts and unix sockets.
    pub tls: Option<StoreTls>,
    /// The CA certificate (PEM) the server's certificate must chain to; needed by
    /// `tls = "require"`.
    pub tls_ca: Option<PathBuf>,
    /// Keep a share snapshot (`shares.snapshot` in `data_dir`) that start-up reads instead of
    /// fetching every entry from the server (PostgreSQL only; the redb store is a local file
    /// already). It holds the same share bytes as the store.
    pub snapshot: bool,
    /// Seconds between snapshots while batches change the shares.
    pub snapshot_interval_s: u64,
}

/// `store.tls`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreTls {
    /// Plaintext, to any host: written out, never assumed for a remote one.
    Disable,
    /// TLS 1.3, the certificate verified against `tls_ca` and the URL's host name.
    Require,
}

impl std::str::FromStr for StoreTls {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        match s {
            "disable" => Ok(Self::Disable),
            "require" => Ok(Self::Require),
            _ => Err(()),
        }
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            url: None,
            schema: "ocelli".to_owned(),
            pool_size: 4,
            tls: None,
            tls_ca: None,
            snapshot: true,
            snapshot_interval_s: 3600,
        }
    }
}

impl StoreConfig {
    /// The share snapshot's file, where one is kept.
    pub fn snapshot_path(&self, data_dir: &Path) -> Option<PathBuf> {
        (self.url.is_some() && self.snapshot).then(|| data_dir.join(SHARE_SNAPSHOT_FILE))
    }

    /// The transport of a validated config.
    pub fn pg_tls(&self) -> crate::store::postgres::PgTls {
        match (self.tls, &self.tls_ca) {
            (Some(StoreTls::Require), Some(ca)) => {
                crate::store::postgres::PgTls::Require { ca: ca.clone() }
            }
            _ => crate::store::postgres::PgTls::Disable,
        }
    }

    /// Checks the TLS settings against `url`, reading the CA file.
    fn check_tls(&self, url: &str) -> Result<(), ConfigError> {
        use crate::store::postgres::{check_plaintext_is_local, check_url, load_ca};
        let bad = |m: &str| Err(ConfigError::Invalid(m.to_owned()));
        match (self.tls, &self.tls_ca) {
            (Some(StoreTls::Require), None) => {
                return bad("store.tls = \"require\" needs store.tls_ca (the server's CA, PEM)")
            }
            (Some(StoreTls::Require), Some(ca)) => {
                load_ca(ca)?;
            }
            // A CA without `require` reads as TLS intended but not in force.
            (_, Some(_)) => return bad("store.tls_ca is set: set store.tls = \"require\" too"),
            (None, None) => check_plaintext_is_local(url)?,
            (Some(StoreTls::Disable), None) => {}
        }
        check_url(url, &self.pg_tls())?;
        Ok(())
    }
}

impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may hold a password.
        f.debug_struct("StoreConfig")
            .field("postgres", &self.url.is_some())
            .field("schema", &self.schema)
            .field("pool_size", &self.pool_size)
            .field("tls", &self.tls)
            .field("tls_ca", &self.tls_ca)
            .field("snapshot", &self.snapshot)
            .field("snapshot_interval_s", &self.snapshot_interval_s)
            .finish()
    }
}

/// Listen addresses.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ListenConfig {
    /// Orb-facing gRPC over TLS.
    pub orb: SocketAddr,
    /// Node-to-node traffic over mutual TLS: the gRPC peer service and the MPC links.
    pub peer: SocketAddr,
    /// Plain HTTP: `/metrics`, `/healthz`, `/readyz`.
    pub metrics: SocketAddr,
}

/// TLS material (PEM files).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// The deployment CA certificate.
    pub ca: PathBuf,
    /// This node's certificate.
    pub cert: PathBuf,
    /// This node's TLS private key.
    pub key: PathBuf,
    /// Certificates of the orb gateways allowed on the orb API (PEM, one per gateway): each
    /// submits and reads the results of its own requests.
    #[serde(default)]
    pub gateways: Vec<PathBuf>,
    /// Certificates of the results consumers (PEM): they may read and stream every result.
    #[serde(default)]
    pub results_consumers: Vec<PathBuf>,
    /// The peer port and the links this node dials key their TLS with X25519MLKEM768 only, so
    /// a handshake without it fails; off, they prefer it and accept X25519 too.
    #[serde(default = "yes")]
    pub require_hybrid_kx_peers: bool,
    /// The orb port accepts only X25519MLKEM768; off, it prefers it and accepts X25519 too
    /// (what every orb gateway must support first: docs/operations.md).
    #[serde(default)]
    pub require_hybrid_kx_orbs: bool,
}

fn yes() -> bool {
    true
}

/// Identity keys.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KeysConfig {
    /// X25519 HPKE secret key (hex).
    pub hpke_secret: PathBuf,
    /// The HPKE secret key before a rotation (hex), kept until no envelope sealed to it is
    /// pending: it opens those, never new submissions.
    #[serde(default)]
    pub hpke_previous_secret: Option<PathBuf>,
    /// X-Wing HPKE secret key: its 32-byte seed (hex). Opens envelope version 2; without it
    /// the node accepts version 1 only.
    #[serde(default)]
    pub hpke_hybrid_secret: Option<PathBuf>,
    /// Ed25519 result-signing key (hex).
    pub result_signing: PathBuf,
    /// File with one allowed orb Ed25519 verifying key (hex) per line.
    pub orb_allow_list: PathBuf,
}

/// Why `engine = "gpu"` cannot run in this build.
pub const GPU_NOT_BUILT: &str =
    "this build has no GPU engine: build with `cargo build --release -p ocelli-node --features gpu`";

/// Which compute backend a node or a benchmark runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// The CPU backend (`ocelli-cpu`).
    #[default]
    Cpu,
    /// The GPU backend (`ocelli-gpu`, a build with the `gpu` feature).
    Gpu,
}

impl core::str::FromStr for EngineKind {
    type Err = String;

    fn from_str(s: &str) -> Result<EngineKind, String> {
        match s {
            "cpu" => Ok(EngineKind::Cpu),
            "gpu" => Ok(EngineKind::Gpu),
            _ => Err(format!("unknown engine {s:?}: cpu or gpu")),
        }
    }
}

/// The matching pipeline; identical on the three nodes.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MatchingConfig {
    /// Run the three-party matching pipeline. Off: every request is answered
    /// "not evaluated" and nothing is enrolled.
    pub enabled: bool,
    /// Match threshold on the fractional Hamming distance.
    pub threshold: f64,
    /// Open only one bit per request (whether anything matched), not which
    /// serial ids matched.
    pub privacy_max: bool,
    /// Database entries per comparison pass, at most.
    pub chunk_entries: usize,
    /// Comparisons per pass, at most (bounds memory: about 100 bytes each).
    pub max_pass_comparisons: usize,
    /// The dot-product engine: `cpu`, or `gpu` (a build with the `gpu` feature).
    pub engine: EngineKind,
    /// CUDA devices of the GPU engine; several hold contiguous shards of the database.
    pub gpu_devices: Vec<usize>,
    /// Threads of the CPU engine; 0 = one per core.
    pub threads: usize,
    /// Measure the CPU engine's tile shapes and chunk lengths on this core at start and run
    /// the fastest (kept per CPU model in `cpu-tuning.toml` in `data_dir`, so only the first
    /// start measures); false, or `OCELLI_CPU_TUNING=off`, runs the defaults.
    pub cpu_tuning: bool,
    /// The CPU engine's kernel: `auto` (the fastest this CPU runs), or one of `avx512-vnni`,
    /// `avx2`, `scalar` (to compare kernels on one machine, or to keep one across a fleet);
    /// a kernel this CPU cannot run stops the start.
    pub cpu_kernel: String,
    /// How long to wait for a peer's message within a protocol round, ms.
    pub round_timeout_ms: u64,
    /// Mirror-attack detection: also match each uniqueness request's and check's mirrored
    /// query against the database and open whether it matched (one more bit per request).
    pub mirror_detection: bool,
    /// The lookback OR rule: a request is compared with the N most recently enrolled people
    /// (and the batch's earlier candidates) under the OR rule. 0 = off.
    pub lookback: usize,
}

impl Default for MatchingConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            threshold: sdk_orb::plaintext::DEFAULT_THRESHOLD,
            privacy_max: false,
            chunk_entries: 4096,
            max_pass_comparisons: 1 << 20,
            engine: EngineKind::Cpu,
            gpu_devices: vec![0],
            threads: 0,
            cpu_tuning: true,
            cpu_kernel: "auto".to_owned(),
            round_timeout_ms: 120_000,
            mirror_detection: true,
            lookback: 0,
        }
    }
}

/// Distance statistics (docs/operations.md, "Distance statistics"); identical on the three
/// nodes. Each batch the nodes count, in MPC, the fractional Hamming distances of a jointly
/// sampled set of (request, enrolled person) pairs and of the pairs that matched into
/// buckets; the counts accumulate as shares and are opened once per period with noise that
/// makes the histogram (epsilon, delta)-differentially private for any one template.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct StatsConfig {
    /// Compute and open the statistics.
    pub enabled: bool,
    /// Impostor pairs sampled per batch (a uniform sample of request x enrolled person).
    pub sample_pairs: usize,
    /// Bucket edges on the fractional Hamming distance, increasing, in [0, 0.5]; the
    /// matching threshold must be one of them. A count per edge interval, and one for
    /// distances at or above the last edge.
    pub edges: Vec<f64>,
    /// A period ends after at least this many batches ...
    pub period_batches: u64,
    /// ... and at least this many seconds since it began, whichever is later ...
    pub period_s: u64,
    /// ... and once it holds at least this many sampled pairs.
    pub min_pairs: u64,
    /// Privacy budget of one opened period: epsilon.
    pub epsilon: f64,
    /// Privacy budget of one opened period: delta.
    pub delta: f64,
}

impl StatsConfig {
    /// Edges 0.0 to 0.5 in steps of 0.025 (the default threshold, 0.345, is not on that
    /// grid, so it is added).
    pub fn default_edges(threshold: f64) -> Vec<f64> {
        let mut edges: Vec<f64> = (0..=20).map(|i| f64::from(i) * 0.025).collect();
        if crate::stats::edge_index(&edges, threshold).is_none() {
            edges.push(threshold);
            edges.sort_by(f64::total_cmp);
        }
        edges
    }

    fn check(&self, threshold: f64) -> Result<(), ConfigError> {
        let bad = |m: &str| Err(ConfigError::Invalid(m.to_owned()));
        if !self.enabled {
            return Ok(());
        }
        if self.edges.len() < 2 {
            return bad("stats.edges must hold at least two edges");
        }
        if self.edges.iter().any(|e| !(0.0..=0.5).contains(e)) {
            return bad("stats.edges must lie in [0, 0.5]");
        }
        if self.edges.windows(2).any(|w| w[0] >= w[1]) {
            return bad("stats.edges must increase");
        }
        if crate::stats::edge_index(&self.edges, threshold).is_none() {
            return bad("stats.edges must include matching.threshold");
        }
        if self.sample_pairs == 0 {
            return bad("stats.sample_pairs must be at least 1 (or stats.enabled = false)");
        }
        if self.period_batches == 0 {
            return bad("stats.period_batches must be at least 1");
        }
        if !(self.epsilon > 0.0 && self.epsilon.is_finite()) {
            return bad("stats.epsilon must be positive");
        }
        if !(self.delta > 0.0 && self.delta < 1.0) {
            return bad("stats.delta must lie in (0, 1)");
        }
        Ok(())
    }
}

impl Default for StatsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            sample_pairs: 256,
            edges: Self::default_edges(sdk_orb::plaintext::DEFAULT_THRESHOLD),
            period_batches: 100,
            period_s: 3600,
            min_pairs: 10_000,
            epsilon: 1.0,
            delta: 1e-6,
        }
    }
}

/// One of the other two parties.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PeerConfig {
    /// Its party id.
    pub party_id: PartyId,
    /// Its node-to-node address.
    pub address: SocketAddr,
    /// The only certificate accepted from it (PEM).
    pub cert: PathBuf,
    /// Name to verify its certificate against (default: the address's IP).
    #[serde(default)]
    pub server_name: Option<String>,
    /// Its Ed25519 result verifying key (hex): checks its attestation of a batch before this
    /// node applies outcomes it did not compute. Without it, no recorded outcome is accepted
    /// (catch-up and replay are refused).
    #[serde(default)]
    pub result_key: Option<PathBuf>,
    /// Its result verifying keys before a rotation (hex), still accepted on its attestations:
    /// batches it signed before switching keys, replayed to a node that is behind, verify
    /// with them. Removed once every node has applied a batch signed with the new key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous_result_keys: Vec<PathBuf>,
}

/// Which envelope versions intake accepts: version 2 always (given `keys.hpke_hybrid_secret`),
/// version 1 until `accept_v1_until` and unless `refuse_v1`.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct EnvelopeConfig {
    /// The end of the migration window (RFC 3339, e.g. `2027-03-01T00:00:00Z`): version 1
    /// envelopes are refused from then on. Absent: no end.
    pub accept_v1_until: Option<String>,
    /// Refuse version 1 envelopes now, whatever the window.
    pub refuse_v1: bool,
}

impl EnvelopeConfig {
    /// The end of the window in milliseconds since the Unix epoch, if one is set.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for a time that is not RFC 3339.
    pub fn v1_until_ms(&self) -> Result<Option<u64>, ConfigError> {
        self.accept_v1_until
            .as_deref()
            .map(|t| {
                crate::clock::parse_rfc3339_ms(t).ok_or_else(|| {
                    ConfigError::Invalid(format!(
                        "envelope.accept_v1_until {t:?} is not an RFC 3339 time"
                    ))
                })
            })
            .transpose()
    }
}

/// Envelope intake limits.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct IntakeConfig {
    /// Oldest accepted capture time, seconds before now.
    pub freshness_window_s: u64,
    /// Largest accepted clock skew into the future, seconds.
    pub max_future_skew_s: u64,
    /// Largest accepted envelope, bytes.
    pub max_envelope_bytes: usize,
    /// Concurrent intake requests.
    pub max_concurrent: usize,
}

impl Default for IntakeConfig {
    fn default() -> Self {
        Self {
            freshness_window_s: 300,
            max_future_skew_s: 30,
            max_envelope_bytes: sdk_orb::envelope::MAX_ENVELOPE_LEN,
            max_concurrent: 64,
        }
    }
}

/// Batch formation.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct BatchConfig {
    /// Most requests in one batch.
    pub max_size: usize,
    /// Pause between batch rounds when the queue is short, milliseconds.
    pub interval_ms: u64,
    /// A request not held by all three nodes after this long times out.
    pub request_timeout_ms: u64,
    /// Deadline of one node-to-node call, milliseconds.
    pub peer_rpc_timeout_ms: u64,
    /// How long a peer may take to evaluate and apply a committed batch.
    pub commit_timeout_ms: u64,
    /// Attempts at a request alone in a batch whose evaluation fails deterministically (a
    /// panic, an evaluator breaking its contract) before party 0 quarantines it.
    pub max_failed_attempts: u32,
}

impl Default for BatchConfig {
    fn default() -> Self {
        Self {
            max_size: 64,
            interval_ms: 200,
            request_timeout_ms: 30_000,
            peer_rpc_timeout_ms: 5_000,
            commit_timeout_ms: 600_000,
            max_failed_attempts: 3,
        }
    }
}

impl BatchConfig {
    /// `interval_ms` as a duration.
    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms)
    }
    /// `request_timeout_ms` as a duration.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }
    /// `peer_rpc_timeout_ms` as a duration.
    pub fn peer_rpc_timeout(&self) -> Duration {
        Duration::from_millis(self.peer_rpc_timeout_ms)
    }

    /// `commit_timeout_ms` as a duration.
    pub fn commit_timeout(&self) -> Duration {
        Duration::from_millis(self.commit_timeout_ms)
    }
}

/// Configuration errors.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The TOML did not parse.
    #[error("invalid config {path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Why.
        source: Box<toml::de::Error>,
    },
    /// An environment override did not parse.
    #[error("invalid value for {var}: {value:?}")]
    Env {
        /// The variable.
        var: String,
        /// Its value.
        value: String,
    },
    /// The config cannot be written as TOML (a path that is not UTF-8).
    #[error("the config cannot be written as TOML: {0}")]
    Write(#[from] toml::ser::Error),
    /// A comparison pass would send a round message larger than a peer message may be.
    #[error(
        "matching.max_pass_comparisons = {max_pass_comparisons} with batch.max_size = {max_batch}: \
         a pass would send a {message_bytes}-byte round message, over the {cap}-byte peer \
         message cap; the largest max_pass_comparisons allowed is {allowed} (and batch.max_size \
         at most {allowed_batch})"
    )]
    PassTooLarge {
        /// The configured comparisons per pass.
        max_pass_comparisons: usize,
        /// The configured batch size.
        max_batch: usize,
        /// The largest round message such a pass sends.
        message_bytes: usize,
        /// What a peer message may carry (less the frame).
        cap: usize,
        /// The largest `max_pass_comparisons` allowed.
        allowed: usize,
        /// The largest batch whose first pass fits.
        allowed_batch: usize,
    },
    /// The values are inconsistent.
    #[error("invalid config: {0}")]
    Invalid(String),
    /// TLS to the PostgreSQL store cannot be set up as configured.
    #[error("invalid config: {0}")]
    StoreTls(#[from] crate::store::postgres::PgTlsError),
}

impl NodeConfig {
    /// Reads `path`, applies `OCELLI_*` overrides from the process
    /// environment, resolves relative paths and validates.
    ///
    /// # Errors
    /// Unreadable file, bad TOML, bad override, inconsistent values.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut cfg = Self::from_toml(&text).map_err(|source| ConfigError::Parse {
            path: path.to_owned(),
            source: Box::new(source),
        })?;
        cfg.apply_env(|k| std::env::var(k).ok())?;
        if let Some(dir) = path.parent() {
            cfg.resolve_paths(dir);
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Parses TOML text (no overrides, no path resolution).
    ///
    /// # Errors
    /// Bad TOML or unknown keys.
    pub fn from_toml(text: &str) -> Result<Self, toml::de::Error> {
        toml::from_str(text)
    }

    /// Applies overrides; `get` reads one variable. Each key of [`env_overrides`] is read
    /// from `OCELLI_<SECTION>_<KEY>`: text as it is for a string, TOML for the rest (`true`,
    /// `7`, `0.3`, `[0, 1]`); an empty value unsets an optional key.
    ///
    /// # Errors
    /// A variable whose value does not parse, or does not fit its key.
    pub fn apply_env(&mut self, get: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        for key in env_overrides() {
            let var = key.env_var();
            let Some(raw) = get(&var) else { continue };
            let bad = || ConfigError::Env {
                var: var.clone(),
                value: raw.clone(),
            };
            let mut table = toml::Table::try_from(&*self)?;
            let section = match key.section {
                None => &mut table,
                Some(s) => match table.entry(s).or_insert_with(|| toml::Table::new().into()) {
                    toml::Value::Table(t) => t,
                    _ => return Err(bad()),
                },
            };
            match env_value(&key, &raw).ok_or_else(bad)? {
                Some(v) => section.insert(key.name.to_owned(), v),
                None => section.remove(key.name),
            };
            *self = table.try_into().map_err(|_| bad())?;
        }
        Ok(())
    }

    /// The config as a TOML file, every key written (defaults included).
    ///
    /// # Errors
    /// [`ConfigError::Write`] for a path that is not UTF-8.
    pub fn to_toml(&self) -> Result<String, ConfigError> {
        Ok(toml::to_string(self)?)
    }

    /// Makes relative paths relative to `dir`.
    pub fn resolve_paths(&mut self, dir: &Path) {
        let fix = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        };
        fix(&mut self.data_dir);
        fix(&mut self.tls.ca);
        fix(&mut self.tls.cert);
        fix(&mut self.tls.key);
        for p in self
            .tls
            .gateways
            .iter_mut()
            .chain(&mut self.tls.results_consumers)
        {
            fix(p);
        }
        fix(&mut self.keys.hpke_secret);
        if let Some(p) = &mut self.keys.hpke_hybrid_secret {
            fix(p);
        }
        if let Some(p) = &mut self.keys.hpke_previous_secret {
            fix(p);
        }
        fix(&mut self.keys.result_signing);
        fix(&mut self.keys.orb_allow_list);
        if let Some(p) = &mut self.store.tls_ca {
            fix(p);
        }
        for p in &mut self.peers {
            fix(&mut p.cert);
            for k in &mut p.previous_result_keys {
                fix(k);
            }
            if let Some(k) = &mut p.result_key {
                fix(k);
            }
        }
    }

    /// Checks party ids and limits, and reads the store's CA file.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the problem, [`ConfigError::StoreTls`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: &str| Err(ConfigError::Invalid(m.to_owned()));
        let mut ids: Vec<PartyId> = self.peers.iter().map(|p| p.party_id).collect();
        ids.sort_unstable();
        if ids[..] != crate::ids::others(self.party_id)[..] {
            return bad("peers must list exactly the two other party ids");
        }
        if self.batch.max_size == 0 {
            return bad("batch.max_size must be at least 1");
        }
        if self.batch.max_failed_attempts == 0 {
            return bad("batch.max_failed_attempts must be at least 1");
        }
        if self.intake.max_envelope_bytes < 1024 {
            return bad("intake.max_envelope_bytes is too small");
        }
        if self.intake.max_concurrent == 0 {
            return bad("intake.max_concurrent must be at least 1");
        }
        let window = self.envelope.v1_until_ms()?;
        if (self.envelope.refuse_v1 || window.is_some()) && self.keys.hpke_hybrid_secret.is_none() {
            return bad("envelope.refuse_v1 and envelope.accept_v1_until need keys.hpke_hybrid_secret (version 2)");
        }
        if !(0.0..0.5).contains(&self.matching.threshold) {
            return bad("matching.threshold must lie in [0, 0.5)");
        }
        if self.matching.chunk_entries == 0 {
            return bad("matching.chunk_entries must be at least 1");
        }
        if self.matching.max_pass_comparisons < 62 {
            return bad("matching.max_pass_comparisons must be at least 62");
        }
        self.check_pass_size()?;
        if self.matching.enabled
            && self.matching.engine == EngineKind::Gpu
            && !cfg!(feature = "gpu")
        {
            return Err(ConfigError::Invalid(format!(
                "matching.engine = \"gpu\": {}",
                GPU_NOT_BUILT
            )));
        }
        let kernel = self.matching.cpu_kernel.as_str();
        if kernel != "auto" && !ocelli_cpu::Kernel::NAMES.contains(&kernel) {
            return Err(ConfigError::Invalid(format!(
                "matching.cpu_kernel {kernel:?}: auto or one of {}",
                ocelli_cpu::Kernel::NAMES.join(", ")
            )));
        }
        if self.matching.gpu_devices.is_empty() {
            return bad("matching.gpu_devices must list at least one device");
        }
        if let Some(url) = &self.store.url {
            if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
                return bad("store.url must be a postgres:// URL");
            }
            self.store.check_tls(url)?;
        }
        if !crate::store::postgres::valid_schema_name(&self.store.schema) {
            return bad("store.schema must match [a-z_][a-z0-9_]*");
        }
        if self.store.snapshot_interval_s == 0 {
            return bad("store.snapshot_interval_s must be at least 1");
        }
        if self.store.pool_size == 0 {
            return bad("store.pool_size must be at least 1");
        }
        let conn = &self.connections;
        if conn.max_unauthenticated == 0 || conn.max_unauthenticated_per_address == 0 {
            return bad("connections.max_unauthenticated and max_unauthenticated_per_address must be at least 1");
        }
        if conn.unauthenticated_timeout_ms == 0 {
            return bad("connections.unauthenticated_timeout_ms must be at least 1");
        }
        if conn.keepalive_interval_ms > 0 && conn.keepalive_timeout_ms == 0 {
            return bad("connections.keepalive_timeout_ms must be at least 1 when pings are on");
        }
        if conn.max_result_streams_per_client == 0 {
            return bad("connections.max_result_streams_per_client must be at least 1");
        }
        let health = &self.health;
        if health.max_pending_age_s == 0 {
            return bad("health.max_pending_age_s must be at least 1");
        }
        if health.max_commit_gap_s == 0 {
            return bad("health.max_commit_gap_s must be at least 1");
        }
        if !(10..=60_000).contains(&health.peer_probe_interval_ms) {
            return bad("health.peer_probe_interval_ms must lie in [10, 60000]");
        }
        self.stats.check(self.matching.threshold)?;
        Ok(())
    }

    /// Checks that the largest round message of any pass fits in one peer message
    /// ([`PEER_MESSAGE_CAP`]), from the protocol's bytes per comparison.
    ///
    /// # Errors
    /// [`ConfigError::PassTooLarge`].
    pub fn check_pass_size(&self) -> Result<(), ConfigError> {
        let cap = PEER_MESSAGE_CAP - MPC_FRAME_OVERHEAD;
        let pipeline = ocelli_mpc::pipeline::PipelineConfig {
            max_pass_comparisons: self.matching.max_pass_comparisons,
            chunk_entries: self.matching.chunk_entries,
            ..ocelli_mpc::pipeline::PipelineConfig::with_threshold(self.matching.threshold)
        };
        let message_bytes = pipeline.largest_message_bytes(self.batch.max_size);
        if message_bytes <= cap {
            return Ok(());
        }
        let allowed = max_pass_comparisons_allowed();
        // B (B + 1) / 2 pairs in the first pass must fit as well.
        let allowed_pairs = allowed / 62;
        let mut allowed_batch = 1usize;
        while (allowed_batch + 1) * (allowed_batch + 2) / 2 <= allowed_pairs {
            allowed_batch += 1;
        }
        Err(ConfigError::PassTooLarge {
            max_pass_comparisons: self.matching.max_pass_comparisons,
            max_batch: self.batch.max_size,
            message_bytes,
            cap,
            allowed,
            allowed_batch,
        })
    }

    /// The peer entry for `party_id`.
    pub fn peer(&self, party_id: PartyId) -> Option<&PeerConfig> {
        self.peers.iter().find(|p| p.party_id == party_id)
    }
}

/// Every key an `OCELLI_<SECTION>_<KEY>` variable overrides: each key of the file but the
/// `[[peers]]` entries.
pub fn env_overrides() -> Vec<Key> {
    schema::keys::<NodeConfig>()
}

/// An override's value as TOML: `None` unsets the key; `None` outside means it does not
/// parse as the key's kind.
fn env_value(key: &Key, raw: &str) -> Option<Option<toml::Value>> {
    if raw.is_empty() && key.optional {
        return Some(None);
    }
    if key.kind == Kind::String {
        return Some(Some(toml::Value::String(raw.to_owned())));
    }
    let mut parsed: toml::Table = toml::from_str(&format!("v = {raw}")).ok()?;
    let v = parsed.remove("v")?;
    let fits = matches!(
        (key.kind, &v),
        (Kind::Bool, toml::Value::Boolean(_))
            | (Kind::Integer, toml::Value::Integer(_))
            | (Kind::Float, toml::Value::Float(_) | toml::Value::Integer(_))
            | (Kind::Array, toml::Value::Array(_))
    );
    fits.then_some(Some(v))
}

/// The overrides as a Markdown table (docs/operations.md holds it).
pub fn env_overrides_table() -> String {
    let mut out = String::from("| Variable | Key | Value |\n|---|---|---|\n");
    for k in env_overrides() {
        let unset = if k.optional { "; empty: unset" } else { "" };
        out.push_str(&format!(
            "| `{}` | `{}` | {}{unset} |\n",
            k.env_var(),
            k.dotted(),
            k.kind.name()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::postgres::{PgTls, PgTlsError};

    const SAMPLE: &str = r#"
party_id = 1
data_dir = "data"
[listen]
orb = "127.0.0.1:1"
peer = "127.0.0.1:2"
metrics = "127.0.0.1:3"
[tls]
ca = "ca.pem"
cert = "c.pem"
key = "k.pem"
[keys]
hpke_secret = "h"
result_signing = "r"
orb_allow_list = "o"
[[peers]]
party_id = 0
address = "127.0.0.1:4"
cert = "p0.pem"
[[peers]]
party_id = 2
address = "127.0.0.1:5"
cert = "p2.pem"
"#;

    #[test]
    fn parses_overrides_and_validates() -> Result<(), Box<dyn std::error::Error>> {
        let mut c = NodeConfig::from_toml(SAMPLE)?;
        c.apply_env(|k| (k == "OCELLI_BATCH_MAX_SIZE").then(|| "7".to_owned()))?;
        assert_eq!(c.batch.max_size, 7);
        c.resolve_paths(Path::new("/etc/ocelli"));
        assert_eq!(c.tls.ca, Path::new("/etc/ocelli/ca.pem"));
        c.validate()?;
        assert!(c.matching.enabled);
        c.apply_env(|k| (k == "OCELLI_MATCHING_PRIVACY_MAX").then(|| "true".to_owned()))?;
        assert!(c.matching.privacy_max);
        c.matching.enabled = false;
        c.validate()?;
        assert!(c.store.url.is_none(), "redb by default");
        c.apply_env(|k| (k == "OCELLI_STORE_URL").then(|| "postgres://localhost/db".to_owned()))?;
        assert_eq!(c.store.url.as_deref(), Some("postgres://localhost/db"));
        c.validate()?;
        c.store.url = Some("mysql://h/db".to_owned());
        assert!(c.validate().is_err(), "only postgres URLs");
        c.store.url = None;
        let e = c.apply_env(|k| (k == "OCELLI_PARTY_ID").then(|| "x".to_owned()));
        assert!(matches!(e, Err(ConfigError::Env { .. })));
        c.party_id = PartyId::ALL[0];
        assert!(c.validate().is_err(), "the peers are not the two others");
        Ok(())
    }

    /// A party id names one of the three parties or the config does not parse, and the error
    /// shows the setting: nothing later meets party 3.
    #[test]
    fn a_party_id_outside_0_to_2_is_refused_naming_the_setting(
    ) -> Result<(), Box<dyn std::error::Error>> {
        for (line, bad) in [
            ("party_id = 1", "party_id = 3"),
            ("party_id = 2", "party_id = 7"),
        ] {
            let text = SAMPLE.replacen(line, bad, 1);
            let e = NodeConfig::from_toml(&text)
                .err()
                .ok_or_else(|| format!("{bad} parsed"))?
                .to_string();
            assert!(e.contains(bad) && e.contains("is not 0, 1 or 2"), "{e}");
        }
        let mut c = NodeConfig::from_toml(SAMPLE)?;
        let e = c.apply_env(|k| (k == "OCELLI_PARTY_ID").then(|| "3".to_owned()));
        assert!(
            matches!(&e, Err(ConfigError::Env { var, .. }) if var == "OCELLI_PARTY_ID"),
            "{e:?}"
        );
        assert_eq!(c.party_id, PartyId::ALL[1]);
        Ok(())
    }

    /// Every variable the hand-kept list had is still derived, with its key.
    #[test]
    fn overrides_are_derived_from_the_structs() {
        let vars: Vec<String> = env_overrides().iter().map(Key::env_var).collect();
        for v in [
            "OCELLI_PARTY_ID",
            "OCELLI_DATA_DIR",
            "OCELLI_LISTEN_ORB",
            "OCELLI_LISTEN_PEER",
            "OCELLI_LISTEN_METRICS",
            "OCELLI_INTAKE_FRESHNESS_WINDOW_S",
            "OCELLI_INTAKE_MAX_FUTURE_SKEW_S",
            "OCELLI_INTAKE_MAX_ENVELOPE_BYTES",
            "OCELLI_BATCH_MAX_SIZE",
            "OCELLI_BATCH_INTERVAL_MS",
            "OCELLI_BATCH_REQUEST_TIMEOUT_MS",
            "OCELLI_HEALTH_MAX_PENDING_AGE_S",
            "OCELLI_HEALTH_MAX_COMMIT_GAP_S",
            "OCELLI_HEALTH_PEER_PROBE_INTERVAL_MS",
            "OCELLI_MATCHING_ENABLED",
            "OCELLI_MATCHING_THRESHOLD",
            "OCELLI_MATCHING_PRIVACY_MAX",
            "OCELLI_MATCHING_MIRROR_DETECTION",
            "OCELLI_MATCHING_LOOKBACK",
            "OCELLI_MATCHING_THREADS",
            "OCELLI_STORE_URL",
            "OCELLI_STORE_SCHEMA",
            "OCELLI_STORE_POOL_SIZE",
            "OCELLI_STORE_TLS",
            "OCELLI_STORE_TLS_CA",
        ] {
            assert!(vars.iter().any(|x| x == v), "{v} missing from {vars:?}");
        }
        assert!(!vars.iter().any(|v| v.starts_with("OCELLI_PEERS")));
        let mut c = NodeConfig::from_toml(SAMPLE).expect("sample parses");
        c.apply_env(|k| match k {
            "OCELLI_MATCHING_GPU_DEVICES" => Some("[1, 2]".to_owned()),
            "OCELLI_MATCHING_ENGINE" => Some("cpu".to_owned()),
            "OCELLI_CONNECTIONS_KEEPALIVE_INTERVAL_MS" => Some("0".to_owned()),
            "OCELLI_MATCHING_THRESHOLD" => Some("0".to_owned()),
            "OCELLI_TLS_CA" => Some("/etc/ca.pem".to_owned()),
            _ => None,
        })
        .expect("overrides apply");
        assert_eq!(c.matching.gpu_devices, vec![1, 2]);
        assert_eq!(c.connections.keepalive_interval_ms, 0);
        assert_eq!(c.matching.threshold, 0.0);
        assert_eq!(c.tls.ca, Path::new("/etc/ca.pem"));
        for (var, value) in [
            ("OCELLI_BATCH_MAX_SIZE", "many"),
            ("OCELLI_MATCHING_ENABLED", "1"),
            ("OCELLI_LISTEN_ORB", "nowhere"),
            ("OCELLI_PARTY_ID", "300"),
            ("OCELLI_MATCHING_ENGINE", "tpu"),
        ] {
            let e = c
                .clone()
                .apply_env(|k| (k == var).then(|| value.to_owned()));
            assert!(
                matches!(&e, Err(ConfigError::Env { var: v, .. }) if v == var),
                "{var}={value}: {e:?}"
            );
        }
    }

    /// The written config is the structs' serialization, and reads back equal.
    #[test]
    fn a_written_config_reads_back() -> Result<(), Box<dyn std::error::Error>> {
        let c = crate::keys::sample_node_config(PartyId::ALL[1], 7000);
        let text = crate::keys::sample_config(PartyId::ALL[1], 7000)?;
        let back = NodeConfig::from_toml(&text)?;
        assert_eq!(back.to_toml()?, c.to_toml()?);
        assert_eq!(back.listen.peer, "127.0.0.1:7011".parse()?);
        assert_eq!(
            back.peers[1].result_key.as_deref(),
            Some(Path::new("party2/result-verifying.pub"))
        );
        back.validate()?;
        Ok(())
    }

    /// docs/operations.md lists the overrides as the schema derives them.
    #[test]
    fn the_operations_guide_lists_every_override() {
        let doc = include_str!("../../docs/operations.md");
        let begin = "<!-- env-overrides: generated by config::env_overrides_table -->\n";
        let start = doc.find(begin).expect("the table's marker") + begin.len();
        let end = start
            + doc[start..]
                .find("<!-- /env-overrides -->")
                .expect("its end");
        assert_eq!(
            doc[start..end],
            env_overrides_table(),
            "docs/operations.md: replace the table with config::env_overrides_table()"
        );
    }

    fn with_store(url: &str, tls: Option<StoreTls>, ca: Option<&Path>) -> NodeConfig {
        let mut c = NodeConfig::from_toml(SAMPLE).expect("sample parses");
        c.store.url = Some(url.to_owned());
        c.store.tls = tls;
        c.store.tls_ca = ca.map(Path::to_owned);
        c
    }

    /// `matching.cpu_kernel` names a kernel or `auto`; the CPU engine's tuning runs the named
    /// one, and a name it does not know stops the start.
    #[test]
    fn the_cpu_kernel_is_chosen_by_name() -> Result<(), Box<dyn std::error::Error>> {
        let mut c = NodeConfig::from_toml(SAMPLE)?;
        assert_eq!(c.matching.cpu_kernel, "auto");
        c.matching.cpu_tuning = false;
        c.matching.cpu_kernel = "scalar".to_owned();
        c.validate()?;
        let tuning = crate::matching::cpu_tuning(&c)?;
        assert_eq!(tuning.tile.kernel(), ocelli_cpu::Kernel::Scalar);
        c.matching.cpu_kernel = "avx3".to_owned();
        assert!(matches!(c.validate(), Err(ConfigError::Invalid(m)) if m.contains("cpu_kernel")));
        c.apply_env(|k| (k == "OCELLI_MATCHING_CPU_KERNEL").then(|| "auto".to_owned()))?;
        assert_eq!(c.matching.cpu_kernel, "auto");
        c.validate()?;
        Ok(())
    }

    #[test]
    fn health_bounds_are_validated() -> Result<(), Box<dyn std::error::Error>> {
        let c = NodeConfig::from_toml(&format!(
            "{SAMPLE}[health]\nmax_pending_age_s = 60\nmax_commit_gap_s = 120\n"
        ))?;
        assert_eq!(c.health.max_pending_age_s, 60);
        assert_eq!(c.health.peer_probe_interval_ms, 5_000);
        c.validate()?;
        let invalid = |f: &dyn Fn(&mut NodeConfig)| {
            let mut c = c.clone();
            f(&mut c);
            matches!(c.validate(), Err(ConfigError::Invalid(m)) if m.starts_with("health."))
        };
        assert!(invalid(&|c| c.health.max_pending_age_s = 0));
        assert!(invalid(&|c| c.health.max_commit_gap_s = 0));
        assert!(invalid(&|c| c.health.peer_probe_interval_ms = 0));
        assert!(invalid(&|c| c.health.peer_probe_interval_ms = 600_000));
        let mut c = c.clone();
        c.apply_env(|k| (k == "OCELLI_HEALTH_MAX_COMMIT_GAP_S").then(|| "7".to_owned()))?;
        assert_eq!(c.health.max_commit_gap_s, 7);
        Ok(())
    }

    #[test]
    fn store_plaintext_only_to_loopback_unless_written() -> Result<(), Box<dyn std::error::Error>> {
        for url in [
            "postgres://u:p@127.0.0.1:5432/db",
            "postgres://u:p@[::1]/db",
            "postgresql://u:p@localhost/db",
            "postgres://u@%2Fvar%2Frun%2Fpostgresql/db",
        ] {
            with_store(url, None, None).validate()?;
        }
        for (url, host) in [
            ("postgres://u:secret@db1.internal:5432/db", "db1.internal"),
            ("postgres://u:secret@10.0.0.5/db", "10.0.0.5"),
            (
                "postgres://u:secret@localhost/db?hostaddr=10.0.0.5",
                "10.0.0.5",
            ),
        ] {
            let e = with_store(url, None, None).validate();
            match &e {
                Err(ConfigError::StoreTls(PgTlsError::PlaintextRemote { host: h })) => {
                    assert_eq!(h, host);
                }
                other => panic!("{url}: expected PlaintextRemote, got {other:?}"),
            }
            let m = e.expect_err("refused").to_string();
            assert!(!m.contains("secret"), "the password leaked: {m}");
        }
        // Written out, plaintext to a remote host is the operator's choice.
        with_store(
            "postgres://u@db1.internal/db",
            Some(StoreTls::Disable),
            None,
        )
        .validate()?;
        Ok(())
    }

    #[test]
    fn store_tls_needs_a_readable_ca_with_a_certificate() -> Result<(), Box<dyn std::error::Error>>
    {
        let url = "postgres://u:p@db1.internal/db";
        let require = Some(StoreTls::Require);
        assert!(matches!(
            with_store(url, require, None).validate(),
            Err(ConfigError::Invalid(m)) if m.contains("store.tls_ca")
        ));
        let dir = tempfile::tempdir()?;
        let missing = dir.path().join("missing.pem");
        let e = with_store(url, require, Some(&missing)).validate();
        assert!(
            matches!(&e, Err(ConfigError::StoreTls(PgTlsError::CaRead { path, .. })) if *path == missing),
            "{e:?}"
        );
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n")?;
        let e = with_store(url, require, Some(&empty)).validate();
        assert!(
            matches!(&e, Err(ConfigError::StoreTls(PgTlsError::CaEmpty { .. }))),
            "{e:?}"
        );
        let ca = dir.path().join("ca.pem");
        let key = rcgen::KeyPair::generate()?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        std::fs::write(&ca, params.self_signed(&key)?.pem())?;
        let c = with_store(url, require, Some(&ca));
        c.validate()?;
        assert_eq!(c.store.pg_tls(), PgTls::Require { ca: ca.clone() });
        // A CA without `require`, TLS over a unix socket, a URL's contrary sslmode.
        assert!(with_store(url, None, Some(&ca)).validate().is_err());
        assert!(with_store(url, Some(StoreTls::Disable), Some(&ca))
            .validate()
            .is_err());
        assert!(matches!(
            with_store("postgres://u@%2Frun%2Fpg/db", require, Some(&ca)).validate(),
            Err(ConfigError::StoreTls(PgTlsError::TlsOverUnixSocket))
        ));
        assert!(matches!(
            with_store(&format!("{url}?sslmode=disable"), require, Some(&ca)).validate(),
            Err(ConfigError::StoreTls(PgTlsError::SslModeConflict { .. }))
        ));
        with_store(&format!("{url}?sslmode=require"), require, Some(&ca)).validate()?;
        let e = with_store("postgres://u:secret@h/db?bogus=1", require, Some(&ca)).validate();
        assert_eq!(
            e.map_err(|e| e.to_string()),
            Err("invalid config: store.url does not parse: unknown option `bogus`".to_owned())
        );
        Ok(())
    }

    #[test]
    fn store_tls_from_the_environment() -> Result<(), Box<dyn std::error::Error>> {
        let mut c = NodeConfig::from_toml(&format!(
            "{SAMPLE}[store]\nurl = \"postgres://u@db1.internal/db\"\ntls = \"require\"\ntls_ca = \"pg-ca.pem\"\n"
        ))?;
        assert_eq!(c.store.tls, Some(StoreTls::Require));
        c.resolve_paths(Path::new("/etc/ocelli"));
        assert_eq!(
            c.store.tls_ca.as_deref(),
            Some(Path::new("/etc/ocelli/pg-ca.pem"))
        );
        c.apply_env(|k| match k {
            "OCELLI_STORE_TLS" => Some("disable".to_owned()),
            "OCELLI_STORE_TLS_CA" => Some(String::new()),
            _ => None,
        })?;
        assert_eq!(
            (c.store.tls, c.store.tls_ca.as_ref()),
            (Some(StoreTls::Disable), None)
        );
        let e = c.apply_env(|k| (k == "OCELLI_STORE_TLS").then(|| "prefer".to_owned()));
        assert!(matches!(e, Err(ConfigError::Env { .. })));
        assert!(NodeConfig::from_toml(&format!("{SAMPLE}[store]\ntls = \"verify-ca\"\n")).is_err());
        Ok(())
    }
}
