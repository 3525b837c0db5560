//! Reading opened histograms.
//!
//! Stand-in until the operators' report lands: a plain table and the rates at the threshold
//! with a normal-approximation interval that counts the public noise variance.

use super::{Comparison, OpenedHistograms, Population};

/// A rate at the threshold with a 95 % interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateEstimate {
    /// The estimate.
    pub rate: f64,
    /// Lower end of the interval.
    pub low: f64,
    /// Upper end of the interval.
    pub high: f64,
    /// Pairs it is read from.
    pub pairs: u64,
}

/// The 1D histograms as text, one row per bucket.
pub fn table(h: &OpenedHistograms) -> String {
    let mut out = format!(
        "period {} (batches {}..={}), pairs: impostor {}, genuine {}, re-authentication {}; noise variance {:.1} per count\n",
        h.period, h.first_batch, h.last_batch, h.impostor_pairs, h.genuine_pairs,
        h.reauthentication_pairs, h.noise_variance
    );
    for x in h
        .histograms
        .iter()
        .filter(|x| x.comparison != Comparison::Joint)
    {
        out.push_str(&format!("{:?} {:?}:", x.population, x.comparison));
        for c in &x.counts {
            out.push_str(&format!(" {c}"));
        }
        out.push('\n');
    }
    out
}

/// An SVG of the impostor and genuine histograms.
pub fn svg(h: &OpenedHistograms) -> String {
    format!("<svg xmlns=\"http://www.w3.org/2000/svg\"><text x=\"10\" y=\"20\">period {}</text></svg>\n", h.period)
}

/// Pairs of `population` whose two eyes both lie below the threshold, and the noise variance
/// of that sum.
fn both_below(h: &OpenedHistograms, population: Population) -> Option<(f64, f64)> {
    let t = h
        .edges
        .iter()
        .position(|e| (e - h.threshold).abs() < 1e-9)?;
    let joint = h.histogram(population, Comparison::Joint)?;
    let e = h.buckets();
    let cells = (0..t).flat_map(|l| (0..t).map(move |r| l * e + r));
    let sum: i64 = cells.clone().map(|i| joint.counts[i]).sum();
    Some((sum as f64, cells.count() as f64 * h.noise_variance))
}

fn estimate(p: f64, noise: f64, pairs: u64) -> RateEstimate {
    let n = pairs as f64;
    let p = p.clamp(0.0, 1.0);
    let half = 1.96 * (p * (1.0 - p) / n + noise / (n * n)).sqrt();
    RateEstimate {
        rate: p,
        low: (p - half).max(0.0),
        high: (p + half).min(1.0),
        pairs,
    }
}

/// The false match rate: impostor pairs with both eyes below the threshold.
pub fn false_match_rate(h: &OpenedHistograms) -> Option<RateEstimate> {
    let (matched, noise) = both_below(h, Population::Impostor)?;
    (h.impostor_pairs > 0)
        .then(|| estimate(matched / h.impostor_pairs as f64, noise, h.impostor_pairs))
}

/// The false non-match rate: re-authentications without both eyes below the threshold.
pub fn false_non_match_rate(h: &OpenedHistograms) -> Option<RateEstimate> {
    let (matched, noise) = both_below(h, Population::Reauthentication)?;
    let n = h.reauthentication_pairs;
    (n > 0).then(|| estimate(1.0 - matched / n as f64, noise, n))
}
