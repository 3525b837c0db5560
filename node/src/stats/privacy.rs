//! Privacy calibration of the opened histograms.
//!
//! Stand-in until the numerical Renyi accounting lands: the Gaussian mechanism's bound on the
//! Skellam noise of two parties (variance `4 mu`), which the exact accounting only tightens.

/// How far one template moves the counts of a period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sensitivity {
    /// Pairs of one population one template can be in.
    pub max_pairs_per_template: u64,
    /// Histograms each pair counts in.
    pub histograms_per_pair: u64,
}

/// The `mu` of each party's `Poisson(mu) - Poisson(mu)` noise such that any two parties'
/// noise makes one opened period (`epsilon`, `delta`)-DP.
pub fn party_skellam_mu(epsilon: f64, delta: f64, s: &Sensitivity) -> f64 {
    let l2_squared =
        (2 * s.histograms_per_pair) as f64 * (s.max_pairs_per_template.max(1) as f64).powi(2);
    let variance = 2.0 * (1.25 / delta).ln() * l2_squared / (epsilon * epsilon);
    variance / 4.0
}
