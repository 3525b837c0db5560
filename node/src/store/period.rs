//! What the store keeps of the distance statistics: this party's running period (its share
//! of the counts, carried from batch to batch) and the histograms each period opened.

use prost::Message;

use super::StoreError;
use crate::stats::OpenedHistograms;

/// This party's running statistics period. Everything but `counts` is agreed data, the same
/// on the three nodes; `counts` is this party's replicated share of the period's counts (in the
/// order of `ocelli_mpc::stats::CountLayout`), different on each node.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StatsPeriod {
    /// The period's number, from 0.
    #[prost(uint64, tag = "1")]
    pub period: u64,
    /// The first batch it counts.
    #[prost(uint64, tag = "2")]
    pub first_batch: u64,
    /// When it began, Unix seconds (the first batch's agreed time).
    #[prost(uint64, tag = "3")]
    pub started_at_unix_s: u64,
    /// Batches counted so far.
    #[prost(uint64, tag = "4")]
    pub batches: u64,
    /// Impostor pairs counted so far.
    #[prost(uint64, tag = "5")]
    pub impostor_pairs: u64,
    /// Genuine pairs counted so far.
    #[prost(uint64, tag = "6")]
    pub genuine_pairs: u64,
    /// Re-authentication pairs counted so far.
    #[prost(uint64, tag = "7")]
    pub reauthentication_pairs: u64,
    /// Enrolled serial ids already in an impostor pair this period, increasing: none is
    /// sampled twice in a period (the privacy bound counts on it).
    #[prost(uint64, repeated, tag = "8")]
    pub used_rows: Vec<u64>,
    /// This party's share of the counts: its own components, then the previous party's.
    #[prost(uint32, repeated, tag = "9")]
    pub counts: Vec<u32>,
    /// Enrolled serial ids already in a genuine pair this period, increasing.
    #[prost(uint64, repeated, tag = "10")]
    pub genuine_rows: Vec<u64>,
    /// Enrolled serial ids already in a re-authentication pair this period, increasing.
    #[prost(uint64, repeated, tag = "11")]
    pub reauthentication_rows: Vec<u64>,
    /// The most impostor pairs one request had in a batch of the period (the privacy
    /// bound's `m`; 0 before any).
    #[prost(uint64, tag = "12")]
    pub max_pairs_per_template: u64,
}

impl StatsPeriod {
    /// A period that begins with batch `first_batch` at `started_at_unix_s`, counting nothing
    /// yet, with `counts` zero shares of `count_words` u32 words (two per count).
    pub fn begin(
        period: u64,
        first_batch: u64,
        started_at_unix_s: u64,
        count_words: usize,
    ) -> Self {
        Self {
            period,
            first_batch,
            started_at_unix_s,
            batches: 0,
            impostor_pairs: 0,
            genuine_pairs: 0,
            reauthentication_pairs: 0,
            used_rows: Vec::new(),
            counts: vec![0; count_words],
            genuine_rows: Vec::new(),
            reauthentication_rows: Vec::new(),
            max_pairs_per_template: 0,
        }
    }

    /// The stored form.
    pub fn encode(&self) -> Vec<u8> {
        self.encode_to_vec()
    }

    /// Parses the stored form.
    ///
    /// # Errors
    /// [`StoreError::Corrupt`] for bytes that do not decode.
    pub fn decode_stored(b: &[u8]) -> Result<Self, StoreError> {
        Self::decode(b).map_err(|_| StoreError::Corrupt("stats_period"))
    }
}

/// What a batch changes in the statistics, written with it.
#[derive(Clone, Debug, PartialEq)]
pub struct StatsWrite {
    /// The running period after the batch (a fresh one where the batch closed the last).
    pub period: StatsPeriod,
    /// The histograms the batch opened, if it closed a period.
    pub opened: Option<OpenedHistograms>,
}

/// The stored form of opened histograms (JSON: operators read it with `ocelli-node stats`).
///
/// # Errors
/// [`StoreError::Corrupt`] if they do not serialise (a non-finite float).
pub fn encode_opened(h: &OpenedHistograms) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(h).map_err(|_| StoreError::Corrupt("opened_histograms"))
}

/// Parses the stored form of opened histograms.
///
/// # Errors
/// [`StoreError::Corrupt`] for bytes that do not parse.
pub fn decode_opened(b: &[u8]) -> Result<OpenedHistograms, StoreError> {
    serde_json::from_slice(b).map_err(|_| StoreError::Corrupt("opened_histograms"))
}
