//! Distance statistics for operators: histograms of the fractional Hamming distance (the
//! minimum over the 31 rotations, as the decision uses) counted in MPC each batch, summed as
//! shares over a period, and opened once per period with noise added inside the MPC so that
//! no node knows the total noise and the opened counts are differentially private for any
//! one template ([`crate::config::StatsConfig`], docs/threat-model.md).
//!
//! [`OpenedHistograms`] is what a period opens; the three nodes store the same one.

pub mod privacy;
pub mod report;
pub mod show;

use serde::{Deserialize, Serialize};

/// Which pairs a histogram counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Population {
    /// A uniform sample of (request, enrolled person) pairs, chosen jointly: strangers,
    /// almost always.
    Impostor,
    /// Pairs that matched: re-captures of one person, censored at the threshold (a genuine
    /// pair above it did not match and is not counted here).
    Genuine,
    /// Re-authentications against the person they name: re-captures of one person counted
    /// whatever their distance, so the false non-match rate is read from them.
    Reauthentication,
}

/// Which comparison of a pair a histogram counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Comparison {
    /// The left eyes.
    Left,
    /// The right eyes.
    Right,
    /// Both eyes: a 2D histogram, left bucket by right bucket.
    Joint,
    /// The request's mirrored left query against the enrolled left eye.
    MirroredLeft,
    /// The request's mirrored right query against the enrolled right eye.
    MirroredRight,
    /// One count: the pairs with both eyes below the threshold (the decision's rule), opened
    /// apart from the joint histogram so that the rate estimates carry one count's noise.
    Matching,
}

/// One opened histogram.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct Histogram {
    /// Which pairs.
    pub population: Population,
    /// Which comparison.
    pub comparison: Comparison,
    /// Noisy counts, one per bucket ([`OpenedHistograms::buckets`]); for [`Comparison::Joint`]
    /// row-major, the left bucket the row; one for [`Comparison::Matching`]. Noise can make a
    /// count negative.
    pub counts: Vec<i64>,
}

/// What one period opens.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
pub struct OpenedHistograms {
    /// The period's number, from 0.
    pub period: u64,
    /// The first and last batch the period counts.
    pub first_batch: u64,
    /// The last batch the period counts.
    pub last_batch: u64,
    /// When it was opened, Unix seconds (the batch's agreed time).
    pub opened_at_unix_s: u64,
    /// Bucket edges on the fractional Hamming distance (`stats.edges`). Bucket `i < n - 1`
    /// holds `edges[i] <= d < edges[i + 1]`, bucket `n - 1` holds `d >= edges[n - 1]`, and
    /// distances below `edges[0]` count in bucket 0.
    pub edges: Vec<f64>,
    /// The matching threshold at the time (one of the edges).
    pub threshold: f64,
    /// The period's privacy budget.
    pub epsilon: f64,
    /// The period's privacy budget.
    pub delta: f64,
    /// Variance of the total noise on each count (public, from the settings).
    pub noise_variance: f64,
    /// Impostor pairs counted (exact: the sample size is public).
    pub impostor_pairs: u64,
    /// Genuine pairs counted (exact: which pairs matched is opened by the decisions).
    pub genuine_pairs: u64,
    /// Re-authentication pairs counted (exact: request types are public).
    pub reauthentication_pairs: u64,
    /// The histograms.
    pub histograms: Vec<Histogram>,
}

/// Where `value` lies among `edges` (equal within 1e-9: edges and thresholds are settings
/// written in decimal).
pub fn edge_index(edges: &[f64], value: f64) -> Option<usize> {
    edges.iter().position(|e| (e - value).abs() < 1e-9)
}

impl OpenedHistograms {
    /// Buckets per 1D histogram: one per edge.
    pub fn buckets(&self) -> usize {
        self.edges.len()
    }

    /// The histogram of `population` and `comparison`, if opened.
    pub fn histogram(&self, population: Population, comparison: Comparison) -> Option<&Histogram> {
        self.histograms
            .iter()
            .find(|h| h.population == population && h.comparison == comparison)
    }
}
