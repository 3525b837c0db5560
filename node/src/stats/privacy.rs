//! Privacy accounting of the opened histograms: the Renyi differential privacy of Skellam
//! noise, computed numerically from its probability mass function, and its conversion to
//! (epsilon, delta).
//!
//! Each party adds `Poisson(mu) - Poisson(mu)` to each count. The guarantee is stated for the
//! noise of two parties only (a Skellam with each Poisson at `2 mu`, variance `4 mu`), so that
//! it holds against any one node, which knows its own draw; the public variance of a count is
//! `6 mu` ([`noise_variance`]).
//!
//! # The worst-case shift
//!
//! Neighbouring inputs differ in one template. Per period one template changes at most
//! `m = max_pairs_per_template` pairs of a population, and a pair's distance enters
//! `histograms_per_pair` histograms; moving one pair moves one unit from one bucket to another
//! in each of them. The count vectors of neighbours therefore differ by an integer vector
//! `s` with `|s|_1 <= L = 2 * histograms_per_pair * m` (so at most `L` coordinates move) and
//! each `|s_i| <= m`. The noise is independent per coordinate, so the Renyi divergence of
//! order alpha is `sum_i f(|s_i|)` with `f(s) = D_alpha(Sk + s || Sk)` (the Skellam is
//! symmetric, so a shift down costs what a shift up does). The largest such sum under the two
//! constraints is found exactly by a knapsack over the integers `1..=m` of total size at most
//! `L` ([`rdp`]), which needs no assumption on the shape of `f`; for a convex `f` it is
//! `2 * histograms_per_pair` coordinates shifted by `m`.
//!
//! # Numerics
//!
//! The Skellam pmf `e^{-2l} I_k(2l)` is computed in log space from the ratios
//! `I_{k+1} / I_k`, which the backward recurrence `r_{k-1} = 1 / (2k / x + r_k)` gives stably,
//! and normalised so the mass sums to one. The divergence sums
//! `exp(alpha ln P(k) + (1 - alpha) ln Q(k))` over a range widened until the terms at both
//! ends are below `1e-18` of the sum; the terms are log-concave in `k` (the log pmf and the
//! privacy loss both are), so the rest of each tail is bounded by a geometric series, which
//! is added.

/// How much one template can change the opened counts of a period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sensitivity {
    /// Pairs of one population that one template can enter in a period (`m`).
    pub max_pairs_per_template: u64,
    /// Histograms one pair's distance enters (6 per population: left, right, joint, the two
    /// mirrored and the matching count, which a pair moves by at most one as a histogram's
    /// bucket does; 18 when one template may enter all three populations).
    pub histograms_per_pair: u64,
}

impl Sensitivity {
    /// Histograms a pair enters within its population.
    pub const HISTOGRAMS_PER_POPULATION: u64 = 6;
    /// Populations one template can enter (an enrolled row: an impostor, a genuine and a
    /// re-authentication pair).
    pub const POPULATIONS: u64 = 3;

    /// The bound for a batch of `requests` requests sampling `sample_pairs` impostor pairs:
    /// a request enters at most `ceil(sample_pairs / requests)` impostor pairs, and every
    /// other population at most once, so `m` covers all three populations.
    pub fn for_batch(sample_pairs: u64, requests: u64) -> Self {
        Self {
            max_pairs_per_template: sample_pairs.div_ceil(requests.max(1)).max(1),
            histograms_per_pair: Self::HISTOGRAMS_PER_POPULATION * Self::POPULATIONS,
        }
    }

    /// The L1 bound on the change of the count vector.
    fn l1(&self) -> u64 {
        2 * self.histograms_per_pair * self.max_pairs_per_template.max(1)
    }
}

/// The orders alpha over which (epsilon, delta) is minimised.
pub const ALPHAS: &[f64] = &[
    1.1, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 7.0, 8.0, 10.0, 12.0, 14.0, 16.0,
    20.0, 24.0, 28.0, 32.0, 40.0, 48.0, 64.0, 80.0, 96.0, 128.0, 192.0, 256.0,
];

/// The public variance of each opened count's noise: three parties' `Poisson(mu) -
/// Poisson(mu)`.
pub fn noise_variance(mu: f64) -> f64 {
    6.0 * mu
}

/// The log pmf of the symmetric Skellam `Poisson(lambda) - Poisson(lambda)` at `0..=k_max`.
#[derive(Clone, Debug)]
struct SkellamPmf {
    ln_pmf: Vec<f64>,
}

impl SkellamPmf {
    fn new(lambda: f64, k_max: usize) -> Self {
        let x = 2.0 * lambda;
        // Backward recurrence for r_k = I_{k+1}(x) / I_k(x), started from the uniform
        // asymptotic ratio far enough above k_max that its error has decayed.
        let start = k_max + 200;
        let mut r = {
            let k = start as f64 + 1.0;
            x / (k + (k * k + x * x).sqrt())
        };
        let mut ln_ratio = vec![0.0; k_max];
        for k in (1..=start).rev() {
            r = 1.0 / (2.0 * k as f64 / x + r);
            if k - 1 < k_max {
                ln_ratio[k - 1] = r.ln();
            }
        }
        let mut ln_pmf = Vec::with_capacity(k_max + 1);
        let mut acc = 0.0;
        ln_pmf.push(0.0);
        for lr in &ln_ratio {
            acc += lr;
            ln_pmf.push(acc);
        }
        // Normalise: the mass over -k_max..=k_max, which the caller makes all but 1e-18 of it.
        let ln_z = log_sum_exp(
            ln_pmf
                .iter()
                .enumerate()
                .flat_map(|(k, &v)| std::iter::repeat_n(v, if k == 0 { 1 } else { 2 })),
        );
        for v in &mut ln_pmf {
            *v -= ln_z;
        }
        Self { ln_pmf }
    }

    fn k_max(&self) -> i64 {
        self.ln_pmf.len() as i64 - 1
    }

    fn ln(&self, k: i64) -> f64 {
        self.ln_pmf[k.unsigned_abs() as usize]
    }
}

/// `ln sum exp(v)`, stable.
fn log_sum_exp(values: impl Iterator<Item = f64> + Clone) -> f64 {
    let max = values.clone().fold(f64::NEG_INFINITY, f64::max);
    if max == f64::NEG_INFINITY {
        return max;
    }
    max + values.map(|v| (v - max).exp()).sum::<f64>().ln()
}

/// `D_alpha(Sk + shift || Sk)` from `pmf`, or `None` when the range is too narrow to bound
/// the tails.
fn divergence_1d(pmf: &SkellamPmf, shift: i64, alpha: f64) -> Option<f64> {
    let k_max = pmf.k_max();
    let term = |k: i64| alpha * pmf.ln(k - shift) + (1.0 - alpha) * pmf.ln(k);
    let lo = -k_max + shift;
    let ln_sum = log_sum_exp((lo..=k_max).map(term));
    // Each tail: its last two terms must be negligible and decreasing outward; the rest of
    // the tail is then at most a geometric series (the terms are log-concave in k).
    let mut ln_tails = Vec::new();
    for (edge, inner) in [(k_max, k_max - 1), (lo, lo + 1)] {
        let (t, t_in) = (term(edge), term(inner));
        if t - ln_sum > -18.0 * std::f64::consts::LN_10 || t >= t_in {
            return None;
        }
        let ln_ratio = t - t_in;
        ln_tails.push(t + ln_ratio - (-ln_ratio.exp()).ln_1p());
    }
    let total = log_sum_exp([ln_sum].into_iter().chain(ln_tails));
    Some(total / (alpha - 1.0))
}

/// The Renyi divergences of order `alpha` for each `ALPHAS` entry and each shift `1..=m`,
/// with a range wide enough for all of them.
fn divergences(lambda: f64, m: u64) -> Vec<Vec<f64>> {
    let mut k_max = 64 + m as usize + (16.0 * (2.0 * lambda).sqrt()) as usize;
    loop {
        let pmf = SkellamPmf::new(lambda, k_max);
        let table: Option<Vec<Vec<f64>>> = ALPHAS
            .iter()
            .map(|&alpha| {
                (1..=m as i64)
                    .map(|s| divergence_1d(&pmf, s, alpha))
                    .collect()
            })
            .collect();
        if let Some(table) = table {
            return table;
        }
        k_max *= 2;
    }
}

/// The largest `sum_i f[s_i - 1]` over integer shifts `1 <= s_i <= f.len()` of total at most
/// `l1`.
fn worst_vector(f: &[f64], l1: u64) -> f64 {
    let l1 = l1 as usize;
    let mut best = vec![0.0f64; l1 + 1];
    for total in 1..=l1 {
        for (i, &cost) in f.iter().enumerate().take(total) {
            best[total] = best[total].max(best[total - i - 1] + cost);
        }
    }
    best[l1]
}

/// The Renyi DP of one opened period, for each order in [`ALPHAS`]: the worst shift vector
/// allowed by `s` against the noise of two parties, each drawing `Poisson(mu) - Poisson(mu)`.
pub fn rdp(mu: f64, s: &Sensitivity) -> Vec<f64> {
    let m = s.max_pairs_per_template.max(1);
    divergences(2.0 * mu, m)
        .iter()
        .map(|f| worst_vector(f, s.l1()))
        .collect()
}

/// `min over alpha of rdp(alpha) + ln(1 / delta) / (alpha - 1)`.
fn epsilon_of(rdp: &[f64], delta: f64) -> f64 {
    ALPHAS
        .iter()
        .zip(rdp)
        .map(|(&alpha, &r)| r + (1.0 / delta).ln() / (alpha - 1.0))
        .fold(f64::INFINITY, f64::min)
}

/// The epsilon, at `delta`, after `periods` opened periods with party noise `mu`: Renyi DP
/// composes by adding.
pub fn epsilon_after(periods: u64, delta: f64, mu: f64, s: &Sensitivity) -> f64 {
    let one = rdp(mu, s);
    let total: Vec<f64> = one.iter().map(|r| r * periods as f64).collect();
    epsilon_of(&total, delta)
}

/// The smallest `mu` (to a relative 1e-6, rounded up) for which one opened period is
/// (`epsilon`, `delta`)-DP against any one node.
///
/// # Panics
/// If `epsilon` is not positive and finite or `delta` not in (0, 1).
pub fn party_skellam_mu(epsilon: f64, delta: f64, s: &Sensitivity) -> f64 {
    assert!(
        epsilon > 0.0 && epsilon.is_finite(),
        "epsilon must be positive"
    );
    assert!(delta > 0.0 && delta < 1.0, "delta must lie in (0, 1)");
    let ok = |mu: f64| epsilon_after(1, delta, mu, s) <= epsilon;
    let mut hi = 1.0;
    while !ok(hi) {
        hi *= 2.0;
    }
    let mut lo = hi / 2.0;
    while lo > 1e-9 && ok(lo) {
        lo /= 2.0;
    }
    while hi / lo > 1.0 + 1e-6 {
        let mid = (lo * hi).sqrt();
        if ok(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT: Sensitivity = Sensitivity {
        max_pairs_per_template: 4,
        histograms_per_pair: 18,
    };

    fn alpha_index(alpha: f64) -> usize {
        ALPHAS
            .iter()
            .position(|&a| a == alpha)
            .expect("an order of the grid")
    }

    /// The Skellam pmf as the convolution of two Poisson pmfs, summed term by term, at
    /// `-range..=range`.
    fn skellam_by_poisson(lambda: f64, range: i64) -> impl Fn(i64) -> f64 {
        let terms = 2 * range as usize + 400;
        let mut ln_fact = vec![0.0f64; terms + 1];
        for n in 1..=terms {
            ln_fact[n] = ln_fact[n - 1] + (n as f64).ln();
        }
        let ln_poisson = move |n: usize| n as f64 * lambda.ln() - lambda - ln_fact[n];
        let pmf: Vec<f64> = (0..=range as usize + 1)
            .map(|k| {
                (0..terms - k)
                    .map(|j| (ln_poisson(j + k) + ln_poisson(j)).exp())
                    .sum()
            })
            .collect();
        move |k: i64| pmf[k.unsigned_abs() as usize]
    }

    #[test]
    fn the_pmf_matches_the_convolution_of_two_poissons() {
        let lambda = 3.5;
        let pmf = SkellamPmf::new(lambda, 120);
        let direct_pmf = skellam_by_poisson(lambda, 60);
        for k in [-40, -7, -1, 0, 2, 9, 25] {
            let direct = direct_pmf(k);
            let ours = pmf.ln(k).exp();
            assert!(
                (ours - direct).abs() <= 1e-12 * direct.max(1e-300),
                "k {k}: {ours} vs {direct}"
            );
        }
    }

    #[test]
    fn the_divergence_of_a_one_step_shift_matches_a_direct_sum() {
        let lambda = 2.0;
        let pmf = SkellamPmf::new(lambda, 200);
        let direct_pmf = skellam_by_poisson(lambda, 160);
        for alpha in [2.0, 5.0] {
            let direct: f64 = (-60i64..60)
                .map(|k| {
                    let p = direct_pmf(k - 1);
                    let q = direct_pmf(k);
                    p.powf(alpha) * q.powf(1.0 - alpha)
                })
                .sum::<f64>()
                .ln()
                / (alpha - 1.0);
            let ours = divergence_1d(&pmf, 1, alpha).expect("wide enough");
            assert!((ours - direct).abs() < 1e-9 * direct, "{ours} vs {direct}");
        }
    }

    /// For a large mu the Skellam is nearly Gaussian with variance 4 mu, whose Renyi
    /// divergence for a shift vector is `alpha |s|_2^2 / (2 sigma^2)`.
    #[test]
    fn for_large_mu_it_agrees_with_the_gaussian_mechanism() {
        let mu = 20_000.0;
        let s = Sensitivity {
            max_pairs_per_template: 2,
            histograms_per_pair: 5,
        };
        let ours = rdp(mu, &s);
        // The worst vector: 10 coordinates shifted by 2.
        let l2_squared = 10.0 * 4.0;
        for alpha in [2.0, 8.0, 32.0] {
            let gauss = alpha * l2_squared / (2.0 * 4.0 * mu);
            let got = ours[alpha_index(alpha)];
            assert!(
                (got - gauss).abs() < 0.01 * gauss,
                "alpha {alpha}: {got} vs {gauss}"
            );
        }
    }

    /// The privacy-loss distribution of a one-coordinate shift, checked directly: the delta at
    /// the epsilon the accounting gives is at most the delta it was asked for.
    #[test]
    fn the_accounted_epsilon_holds_for_the_exact_privacy_loss() {
        let s = Sensitivity {
            max_pairs_per_template: 1,
            histograms_per_pair: 1,
        };
        let delta = 1e-6;
        let mu = party_skellam_mu(1.0, delta, &s);
        // Shift vector: two coordinates moved by one, independent, so the privacy loss is the
        // sum of two independent one-dimensional losses.
        let lambda = 2.0 * mu;
        let range = 400i64;
        let direct_pmf = skellam_by_poisson(lambda, range + 1);
        let loss: Vec<(f64, f64)> = (-range..=range)
            .map(|k| {
                let p = direct_pmf(k - 1);
                let q = direct_pmf(k);
                (p, (p / q).ln())
            })
            .collect();
        let eps = 1.0;
        let mut exact_delta = 0.0;
        for &(p1, l1) in &loss {
            for &(p2, l2) in &loss {
                // delta = E_P[max(0, 1 - e^{eps - loss})].
                let l = l1 + l2;
                if l > eps {
                    exact_delta += p1 * p2 * (1.0 - (eps - l).exp());
                }
            }
        }
        assert!(exact_delta <= delta, "{exact_delta} > {delta}");
        println!("mu {mu}: exact delta at epsilon 1: {exact_delta:e}");
    }

    #[test]
    fn epsilon_falls_with_mu_and_grows_with_periods() {
        let delta = 1e-6;
        let e = |periods, mu| epsilon_after(periods, delta, mu, &DEFAULT);
        assert!(e(1, 50.0) > e(1, 100.0));
        assert!(e(1, 100.0) > e(1, 400.0));
        assert!(e(1, 100.0) < e(2, 100.0));
        assert!(e(2, 100.0) < e(24, 100.0));
    }

    #[test]
    fn the_calibrated_mu_meets_the_budget_and_no_less_does() {
        let mu = party_skellam_mu(1.0, 1e-6, &DEFAULT);
        assert!(epsilon_after(1, 1e-6, mu, &DEFAULT) <= 1.0);
        assert!(epsilon_after(1, 1e-6, mu * 0.999, &DEFAULT) > 1.0);
        // A smaller budget or a larger sensitivity needs more noise.
        assert!(party_skellam_mu(0.5, 1e-6, &DEFAULT) > mu);
        let wider = Sensitivity {
            max_pairs_per_template: 8,
            ..DEFAULT
        };
        assert!(party_skellam_mu(1.0, 1e-6, &wider) > mu);
    }

    #[test]
    fn the_worst_vector_is_exact_for_a_concave_and_a_convex_cost() {
        // Convex: concentrate in the largest shift.
        assert_eq!(worst_vector(&[1.0, 4.0, 9.0], 6), 18.0);
        // Concave: spread over unit shifts.
        assert_eq!(worst_vector(&[1.0, 1.5, 1.8], 6), 6.0);
    }

    #[test]
    fn the_batch_sensitivity_rounds_the_pairs_per_request_up() {
        assert_eq!(Sensitivity::for_batch(256, 64), DEFAULT);
        assert_eq!(Sensitivity::for_batch(256, 100).max_pairs_per_template, 3);
        assert_eq!(Sensitivity::for_batch(16, 1000).max_pairs_per_template, 1);
        assert_eq!(Sensitivity::for_batch(16, 0).max_pairs_per_template, 16);
    }
}
