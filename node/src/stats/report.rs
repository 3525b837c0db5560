//! What operators read from an opened period: a text table, an SVG chart, and the false
//! match and false non-match rates at the threshold with confidence intervals
//! (docs/operations.md, "Distance statistics").
//!
//! The opened counts carry zero-mean noise and can be negative. The estimates use them as
//! opened (so they stay unbiased); only what is drawn or shown as a fraction clamps a count
//! at zero.

use std::fmt::Write as _;

use super::{Comparison, Histogram, OpenedHistograms, Population};

/// Fewer pairs than this give no rate estimate.
pub const MIN_RATE_PAIRS: u64 = 30;

/// The normal quantile of the two-sided 95 % intervals.
const Z95: f64 = 1.959_963_984_540_054;

/// The populations in the order of the opened share vector.
pub const POPULATIONS: [Population; 3] = [
    Population::Impostor,
    Population::Genuine,
    Population::Reauthentication,
];

/// The one-dimensional comparisons, in the order of the table's columns.
const ONE_D: [Comparison; 4] = [
    Comparison::Left,
    Comparison::Right,
    Comparison::MirroredLeft,
    Comparison::MirroredRight,
];

/// A population's name in labels and output (`impostor`, `genuine`, `reauthentication`).
pub fn population_name(p: Population) -> &'static str {
    match p {
        Population::Impostor => "impostor",
        Population::Genuine => "genuine",
        Population::Reauthentication => "reauthentication",
    }
}

/// A comparison's name in labels and output.
pub fn comparison_name(c: Comparison) -> &'static str {
    match c {
        Comparison::Left => "left",
        Comparison::Right => "right",
        Comparison::Joint => "joint",
        Comparison::MirroredLeft => "mirrored_left",
        Comparison::MirroredRight => "mirrored_right",
        Comparison::Matching => "matching",
    }
}

/// The pairs a population counted (exact).
pub fn pairs(h: &OpenedHistograms, p: Population) -> u64 {
    match p {
        Population::Impostor => h.impostor_pairs,
        Population::Genuine => h.genuine_pairs,
        Population::Reauthentication => h.reauthentication_pairs,
    }
}

/// A bucket's range, `[lo, hi)` or `>= lo` for the last.
pub fn bucket_label(edges: &[f64], i: usize) -> String {
    match edges.get(i + 1) {
        Some(hi) => format!("[{:.3}, {hi:.3})", edges[i]),
        None => format!(">= {:.3}", edges[i]),
    }
}

/// The index of the bucket that starts at the threshold: buckets below it hold the
/// distances that match.
fn threshold_bucket(h: &OpenedHistograms) -> Option<usize> {
    super::edge_index(&h.edges, h.threshold)
}

/// A count over pairs as a fraction for display, the count clamped at zero.
fn fraction(count: i64, pairs: u64) -> f64 {
    if pairs == 0 {
        0.0
    } else {
        count.max(0) as f64 / pairs as f64
    }
}

/// The period as text: per population, the 1D histograms side by side (noisy count and
/// fraction of the population's pairs per bucket, a line at the threshold), then the joint
/// histogram as a grid, left bucket the row.
pub fn table(h: &OpenedHistograms) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "period {} (batches {}..={}, opened at {}), threshold {:.3}, epsilon {}, delta {:e}, \
         noise standard deviation {:.1} per count",
        h.period,
        h.first_batch,
        h.last_batch,
        h.opened_at_unix_s,
        h.threshold,
        h.epsilon,
        h.delta,
        h.noise_variance.sqrt()
    );
    let _ = writeln!(
        out,
        "counts are noisy (they can be negative); fractions clamp them at zero"
    );
    let t = threshold_bucket(h);
    for p in POPULATIONS {
        let n = pairs(h, p);
        let _ = writeln!(out, "\n{} pairs: {n}", population_name(p));
        let _ = write!(out, "{:<16}", "distance");
        for c in ONE_D {
            let _ = write!(out, "{:>24}", comparison_name(c));
        }
        out.push('\n');
        for i in 0..h.buckets() {
            if Some(i) == t {
                let _ = writeln!(out, "{:-<112}", format!("-- threshold {:.3} ", h.threshold));
            }
            let _ = write!(out, "{:<16}", bucket_label(&h.edges, i));
            for c in ONE_D {
                match h.histogram(p, c).and_then(|g| g.counts.get(i)) {
                    Some(&count) => {
                        let _ = write!(out, "{count:>14} {:>8.4} ", fraction(count, n));
                    }
                    None => {
                        let _ = write!(out, "{:>24}", "-");
                    }
                }
            }
            out.push('\n');
        }
        if let Some(joint) = h.histogram(p, Comparison::Joint) {
            out.push_str(&joint_grid(h, joint));
        }
        if let Some(count) = opened_matching(h, p) {
            let _ = writeln!(
                out,
                "both eyes below the threshold: {count} {:.4}",
                fraction(count, n)
            );
        }
    }
    out
}

/// The joint histogram as a grid: rows left buckets, columns right buckets, each labelled by
/// its lower edge; `|` after the last matching bucket.
fn joint_grid(h: &OpenedHistograms, joint: &Histogram) -> String {
    let e = h.buckets();
    let t = threshold_bucket(h);
    let width = joint
        .counts
        .iter()
        .map(|c| c.to_string().len())
        .chain([5])
        .max()
        .unwrap_or(5)
        + 1;
    let mut out = String::from("joint (rows: left from, columns: right from)\n");
    let _ = write!(out, "{:>6}", "");
    for (j, edge) in h.edges.iter().enumerate() {
        if Some(j) == t {
            out.push('|');
        }
        let _ = write!(
            out,
            "{:>width$}",
            format!("{edge:.3}").trim_start_matches('0')
        );
    }
    out.push('\n');
    for (i, edge) in h.edges.iter().enumerate() {
        let _ = write!(out, "{:>6}", format!("{edge:.3}").trim_start_matches('0'));
        for j in 0..e {
            if Some(j) == t {
                out.push('|');
            }
            match joint.counts.get(i * e + j) {
                Some(c) => {
                    let _ = write!(out, "{c:>width$}");
                }
                None => {
                    let _ = write!(out, "{:>width$}", "-");
                }
            }
        }
        out.push('\n');
    }
    out
}

/// A rate at the threshold with its two-sided 95 % interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RateEstimate {
    /// The estimate from the noisy counts as opened (unbiased; noise can put it below 0).
    pub rate: f64,
    /// Lower end of the interval, in [0, 1].
    pub low: f64,
    /// Upper end of the interval, in [0, 1].
    pub high: f64,
    /// The pairs it is read from (exact).
    pub pairs: u64,
}

/// A population's opened matching count, where the period has one.
fn opened_matching(h: &OpenedHistograms, p: Population) -> Option<i64> {
    h.histogram(p, Comparison::Matching)
        .and_then(|g| g.counts.first())
        .copied()
}

/// The noisy number of a population's pairs that match (both eyes below the threshold, as
/// the decision requires), and its noise variance in units of one count's: the opened
/// matching count (one count's noise) where the period has it, else from the joint histogram.
/// The joint cells sum to the exact pair count, so there the matching count is read twice,
/// independently: as the sum of the cells below and as the pairs less the other cells; the
/// two are combined weighted by the inverse of their variances (`b` and `a` cells), which
/// leaves `a b / (a + b)` counts' worth of noise (about 117 at the default edges).
fn matching_count(h: &OpenedHistograms, p: Population) -> Option<(f64, f64)> {
    if let Some(count) = opened_matching(h, p) {
        return Some((count as f64, 1.0));
    }
    let t = threshold_bucket(h)?;
    let e = h.buckets();
    let joint = h.histogram(p, Comparison::Joint)?;
    if joint.counts.len() != e * e {
        return None;
    }
    let (mut below, mut above) = (0i64, 0i64);
    for (k, &c) in joint.counts.iter().enumerate() {
        if k / e < t && k % e < t {
            below += c;
        } else {
            above += c;
        }
    }
    let b = (t * t) as f64;
    let a = (e * e) as f64 - b;
    let direct = below as f64;
    let complement = pairs(h, p) as f64 - above as f64;
    Some(((a * direct + b * complement) / (a + b), a * b / (a + b)))
}

/// The Wilson score interval for a proportion from `n` trials whose success count carries
/// extra zero-mean noise of variance `noise_variance`: the `p` with
/// `(p_hat - p)^2 <= z^2 (p (1 - p) / n + noise_variance / n^2)`.
pub fn wilson_with_noise(p_hat: f64, n: u64, noise_variance: f64, z: f64) -> (f64, f64) {
    let n = n as f64;
    let z2 = z * z;
    let w = noise_variance / (n * n);
    let a = 1.0 + z2 / n;
    let b = 2.0 * p_hat + z2 / n;
    let c = p_hat * p_hat - z2 * w;
    let root = (b * b - 4.0 * a * c).max(0.0).sqrt();
    let low = ((b - root) / (2.0 * a)).clamp(0.0, 1.0);
    let high = ((b + root) / (2.0 * a)).clamp(0.0, 1.0);
    (low, high)
}

fn rate(h: &OpenedHistograms, p: Population, non_match: bool) -> Option<RateEstimate> {
    let n = pairs(h, p);
    if n < MIN_RATE_PAIRS {
        return None;
    }
    let (matching, noise_counts) = matching_count(h, p)?;
    let count = if non_match {
        n as f64 - matching
    } else {
        matching
    };
    let p_hat = count / n as f64;
    let (low, high) = wilson_with_noise(p_hat, n, noise_counts * h.noise_variance, Z95);
    Some(RateEstimate {
        rate: p_hat,
        low,
        high,
        pairs: n,
    })
}

/// The false match rate at the threshold: the impostor pairs with both eyes below it, over
/// the impostor pairs, from the opened matching count (or, for a period opened without one,
/// the joint histogram read both ways, as `matching_count` does). The 95 % interval is
/// Wilson's score interval with the noise variance of that count added to the binomial variance
/// ([`wilson_with_noise`]). `None` below [`MIN_RATE_PAIRS`] pairs or without the joint
/// histogram.
pub fn false_match_rate(h: &OpenedHistograms) -> Option<RateEstimate> {
    rate(h, Population::Impostor, false)
}

/// The false non-match rate at the threshold: the re-authentication pairs with an eye at or
/// above it, over the re-authentication pairs (the genuine population is censored at the
/// threshold and cannot give it). Interval and `None` as for [`false_match_rate`].
pub fn false_non_match_rate(h: &OpenedHistograms) -> Option<RateEstimate> {
    rate(h, Population::Reauthentication, true)
}

/// Chart geometry: one panel per population with pairs, stacked.
const WIDTH: f64 = 760.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 40.0;
const PANEL_H: f64 = 150.0;
/// Between panels: the lower one's title and the upper one's distance ticks.
const PANEL_GAP: f64 = 50.0;
const BOTTOM: f64 = 50.0;
/// Distance at the chart's right end; the last bucket, open above, is drawn up to it.
const X_MAX: f64 = 0.55;
/// The noise band's half-width in standard deviations of one count's noise.
const BAND_SIGMAS: f64 = 2.0;

/// The chart's height with `panels` panels.
fn chart_height(panels: usize) -> f64 {
    TOP + panels as f64 * PANEL_H + panels.saturating_sub(1) as f64 * PANEL_GAP + BOTTOM
}

/// The line styles of a panel: left, right and the two mirrored comparisons together.
const LINES: [(&str, &str, &[Comparison]); 3] = [
    ("left", "", &[Comparison::Left]),
    ("right", "6 3", &[Comparison::Right]),
    (
        "mirrored",
        "2 3",
        &[Comparison::MirroredLeft, Comparison::MirroredRight],
    ),
];

/// One line of a panel: density per unit distance in each bucket.
struct Series {
    dash: &'static str,
    density: Vec<f64>,
}

/// One population's panel.
struct Panel {
    population: Population,
    pairs: u64,
    series: Vec<Series>,
    /// Per bucket, [`BAND_SIGMAS`] standard deviations of one histogram's noise as a density:
    /// what one eye's line can show where the population has no pairs.
    band: Vec<f64>,
}

fn bucket_widths(h: &OpenedHistograms) -> Vec<f64> {
    (0..h.buckets())
        .map(|i| h.edges.get(i + 1).copied().unwrap_or(X_MAX) - h.edges[i])
        .map(|w| w.max(1e-9))
        .collect()
}

fn panels(h: &OpenedHistograms) -> Vec<Panel> {
    let widths = bucket_widths(h);
    let sigma = h.noise_variance.max(0.0).sqrt();
    let mut out = Vec::new();
    for p in POPULATIONS {
        let n = pairs(h, p);
        if n == 0 {
            continue;
        }
        let mut series = Vec::new();
        for (_, dash, comparisons) in LINES {
            let hists: Vec<&Histogram> = comparisons
                .iter()
                .filter_map(|&c| h.histogram(p, c))
                .collect();
            if hists.is_empty() {
                continue;
            }
            let total = n as f64 * hists.len() as f64;
            let density = widths
                .iter()
                .enumerate()
                .map(|(i, w)| {
                    let count: i64 = hists.iter().filter_map(|g| g.counts.get(i)).sum();
                    count.max(0) as f64 / total / w
                })
                .collect();
            series.push(Series { dash, density });
        }
        let band = widths
            .iter()
            .map(|w| BAND_SIGMAS * sigma / n as f64 / w)
            .collect();
        out.push(Panel {
            population: p,
            pairs: n,
            series,
            band,
        });
    }
    out
}

fn colour(p: Population) -> &'static str {
    match p {
        Population::Impostor => "#c0392b",
        Population::Genuine => "#2471a3",
        Population::Reauthentication => "#1e8449",
    }
}

/// A round step for `max / 2` or less: 1, 2 or 5 times a power of ten.
fn tick_step(max: f64) -> f64 {
    let rough = (max / 2.0).max(1e-12);
    let power = 10f64.powf(rough.log10().floor());
    [5.0, 2.0, 1.0]
        .into_iter()
        .map(|m| m * power)
        .find(|&s| s <= rough)
        .unwrap_or(power)
}

/// A line's `stroke-dasharray` attribute, none for a solid line.
fn dash_attribute(dash: &str) -> String {
    if dash.is_empty() {
        String::new()
    } else {
        format!(r#" stroke-dasharray="{dash}""#)
    }
}

const MIDDLE: &str = r#" text-anchor="middle""#;
const END: &str = r#" text-anchor="end""#;

/// A `<text>` element at (`x`, `y`) with extra `attributes`; `body` is text the chart itself
/// writes (no markup characters).
fn text(out: &mut String, x: f64, y: f64, attributes: &str, body: &str) {
    let _ = writeln!(
        out,
        r#"<text x="{x:.1}" y="{y:.1}"{attributes}>{body}</text>"#
    );
}

/// A step path over the buckets at heights `values`, with `y` mapping a value to the page.
fn steps(
    h: &OpenedHistograms,
    values: &[f64],
    x: &dyn Fn(f64) -> f64,
    y: &dyn Fn(f64) -> f64,
) -> String {
    let mut d = String::new();
    for (i, v) in values.iter().enumerate() {
        let lo = h.edges[i];
        let hi = h.edges.get(i + 1).copied().unwrap_or(X_MAX);
        let cmd = if i == 0 { 'M' } else { 'L' };
        let _ = write!(
            d,
            "{cmd}{:.1} {:.1} L{:.1} {:.1} ",
            x(lo),
            y(*v),
            x(hi),
            y(*v)
        );
    }
    d.trim_end().to_owned()
}

/// The period as a self-contained SVG chart, one panel per population with pairs, each on
/// its own scale: the left, right and mirrored distance histograms as densities (fraction of
/// the population's pairs per unit distance, negative counts drawn as zero), the threshold
/// marked, and a grey band from zero up to two standard deviations of the noise on one
/// eye's line, so a reader sees which bars stand above the noise and which a small
/// population's noise alone could draw.
pub fn svg(h: &OpenedHistograms) -> String {
    let plot_w = WIDTH - LEFT - RIGHT;
    let all = panels(h);
    let height = chart_height(all.len().max(1));
    let x = |d: f64| LEFT + d.clamp(0.0, X_MAX) / X_MAX * plot_w;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        out,
        "<title>Distance statistics, period {} (batches {} to {})</title>",
        h.period, h.first_batch, h.last_batch
    );
    let _ = writeln!(
        out,
        r##"<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/>"##
    );
    let heading = format!(
        "period {}, batches {} to {}: fraction of pairs per unit distance",
        h.period, h.first_batch, h.last_batch
    );
    text(&mut out, LEFT, 18.0, "", &heading);
    for (k, panel) in all.iter().enumerate() {
        let top = TOP + k as f64 * (PANEL_H + PANEL_GAP);
        let bottom = top + PANEL_H;
        // The scale: the lines, and the band where the buckets are of the usual width (the
        // narrow bucket the threshold cuts off has a band several times as high).
        let mut bands = panel.band.clone();
        bands.sort_by(f64::total_cmp);
        let usual_band = bands.get(bands.len() / 2).copied().unwrap_or(0.0);
        let y_max = panel
            .series
            .iter()
            .flat_map(|s| s.density.iter().copied())
            .fold(usual_band, f64::max)
            .max(1e-9)
            * 1.08;
        let y = |v: f64| bottom - v.min(y_max) / y_max * PANEL_H;
        let title = format!(
            "{}: {} pairs",
            population_name(panel.population),
            panel.pairs
        );
        let _ = writeln!(
            out,
            r#"<text x="{LEFT:.1}" y="{:.1}" fill="{}" font-weight="bold">{title}</text>"#,
            top - 8.0,
            colour(panel.population)
        );
        // The band under the lines.
        let band = steps(h, &panel.band, &x, &y);
        let _ = writeln!(
            out,
            r##"<path d="{band} L{:.1} {bottom:.1} L{:.1} {bottom:.1} Z" fill="#e5e7e9"/>"##,
            x(X_MAX),
            x(0.0)
        );
        let _ = writeln!(
            out,
            r##"<path d="M{LEFT} {top} V{bottom} H{}" fill="none" stroke="#333333"/>"##,
            LEFT + plot_w
        );
        let step = tick_step(y_max);
        let mut v = 0.0;
        while v <= y_max {
            text(&mut out, LEFT - 6.0, y(v) + 4.0, END, &format!("{v}"));
            let _ = writeln!(
                out,
                r##"<line x1="{:.1}" y1="{:.1}" x2="{LEFT}" y2="{:.1}" stroke="#333333"/>"##,
                LEFT - 3.0,
                y(v),
                y(v)
            );
            v += step;
        }
        for i in 0..=10 {
            let d = f64::from(i) * 0.05;
            text(&mut out, x(d), bottom + 16.0, MIDDLE, &format!("{d:.2}"));
        }
        let tx = x(h.threshold);
        let _ = writeln!(
            out,
            r##"<line x1="{tx:.1}" y1="{top}" x2="{tx:.1}" y2="{bottom}" stroke="#000000" stroke-dasharray="4 4"/>"##
        );
        if k == 0 {
            let label = format!("threshold {:.3}", h.threshold);
            text(&mut out, tx + 4.0, top + 12.0, "", &label);
        }
        for s in &panel.series {
            let _ = writeln!(
                out,
                r#"<path d="{}" fill="none" stroke="{}" stroke-width="1.5"{}/>"#,
                steps(h, &s.density, &x, &y),
                colour(panel.population),
                dash_attribute(s.dash)
            );
        }
    }
    text(
        &mut out,
        LEFT + plot_w / 2.0,
        height - 12.0,
        MIDDLE,
        "fractional Hamming distance (minimum over rotations)",
    );
    // The legend: line styles, and the band.
    let lx = LEFT + plot_w + 16.0;
    for (k, (name, dash, _)) in LINES.iter().enumerate() {
        let ly = TOP + 10.0 + 18.0 * k as f64;
        let _ = writeln!(
            out,
            r##"<line x1="{lx:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="#333333" stroke-width="1.5"{}/>"##,
            lx + 24.0,
            dash_attribute(dash)
        );
        text(&mut out, lx + 30.0, ly + 4.0, "", name);
    }
    let ly = TOP + 10.0 + 18.0 * LINES.len() as f64;
    let _ = writeln!(
        out,
        r##"<rect x="{lx:.1}" y="{:.1}" width="24" height="10" fill="#e5e7e9"/>"##,
        ly - 5.0
    );
    text(&mut out, lx + 30.0, ly + 4.0, "", "noise, 2 sd (one eye)");
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Edges 0, 0.1, 0.2, 0.3 (the threshold), 0.4: five buckets.
    const EDGES: [f64; 5] = [0.0, 0.1, 0.2, 0.3, 0.4];

    fn opened(noise_variance: f64) -> OpenedHistograms {
        let e = EDGES.len();
        let mut histograms = Vec::new();
        for p in POPULATIONS {
            // Impostors high, re-captures low.
            let one_d: Vec<i64> = match p {
                Population::Impostor => vec![0, 0, 5, 95, 900],
                Population::Genuine => vec![40, 50, 10, 0, 0],
                Population::Reauthentication => vec![30, 40, 20, 6, 4],
            };
            for c in ONE_D {
                histograms.push(Histogram {
                    population: p,
                    comparison: c,
                    counts: one_d.clone(),
                });
            }
            let mut joint = vec![0i64; e * e];
            match p {
                // 2 pairs with both eyes below 0.3, 3 with only the left, rest above.
                Population::Impostor => {
                    joint[2 * e + 2] = 2;
                    joint[2 * e + 4] = 3;
                    joint[4 * e + 4] = 995;
                }
                Population::Genuine => joint[0] = 100,
                // 90 both below, 6 with the right at 0.3, 4 with both above.
                Population::Reauthentication => {
                    joint[e + 1] = 90;
                    joint[e + 3] = 6;
                    joint[4 * e + 4] = 4;
                }
            }
            histograms.push(Histogram {
                population: p,
                comparison: Comparison::Joint,
                counts: joint,
            });
        }
        OpenedHistograms {
            period: 7,
            first_batch: 700,
            last_batch: 799,
            opened_at_unix_s: 1_800_000_000,
            edges: EDGES.to_vec(),
            threshold: 0.3,
            epsilon: 1.0,
            delta: 1e-6,
            noise_variance,
            impostor_pairs: 1000,
            genuine_pairs: 100,
            reauthentication_pairs: 100,
            histograms,
        }
    }

    #[test]
    fn the_false_match_rate_counts_impostors_with_both_eyes_below_the_threshold() {
        let fmr = false_match_rate(&opened(0.0)).expect("enough pairs");
        assert_eq!(fmr.pairs, 1000);
        assert!((fmr.rate - 0.002).abs() < 1e-12, "{}", fmr.rate);
        // Without noise: Wilson's interval, checked against its closed form.
        let (n, p, z) = (1000.0, 0.002, Z95);
        let centre = (p + z * z / (2.0 * n)) / (1.0 + z * z / n);
        let half = z / (1.0 + z * z / n) * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt();
        assert!((fmr.low - (centre - half)).abs() < 1e-12);
        assert!((fmr.high - (centre + half)).abs() < 1e-12);
    }

    #[test]
    fn the_false_non_match_rate_counts_reauthentications_with_an_eye_at_the_threshold() {
        let fnmr = false_non_match_rate(&opened(0.0)).expect("enough pairs");
        assert!((fnmr.rate - 0.10).abs() < 1e-12, "{}", fnmr.rate);
        assert!(fnmr.low < 0.10 && fnmr.high > 0.10);
    }

    #[test]
    fn noise_widens_the_interval_and_too_few_pairs_give_none() {
        let quiet = false_match_rate(&opened(0.0)).expect("enough pairs");
        let noisy = false_match_rate(&opened(400.0)).expect("enough pairs");
        assert_eq!(quiet.rate, noisy.rate);
        assert!(noisy.high - noisy.low > quiet.high - quiet.low);
        let mut few = opened(0.0);
        few.reauthentication_pairs = MIN_RATE_PAIRS - 1;
        assert_eq!(false_non_match_rate(&few), None);
        few.histograms.retain(|g| g.comparison != Comparison::Joint);
        assert_eq!(false_match_rate(&few), None);
    }

    /// With 9 cells below the threshold and 16 above (of 25), the matching count is read as
    /// the 9 below and as the pairs less the 16 above, weighted 16 : 9, with the noise of
    /// 9 x 16 / 25 counts.
    #[test]
    fn an_opened_matching_count_is_read_alone_with_one_counts_noise() {
        let v = 100.0;
        let from_joint = false_match_rate(&opened(v)).expect("enough pairs");
        let mut h = opened(v);
        // 7 where the joint cells say 2: the opened count is the one read.
        h.histograms.push(Histogram {
            population: Population::Impostor,
            comparison: Comparison::Matching,
            counts: vec![7],
        });
        let fmr = false_match_rate(&h).expect("enough pairs");
        assert!((fmr.rate - 0.007).abs() < 1e-12, "{}", fmr.rate);
        let (low, high) = wilson_with_noise(0.007, 1000, v, Z95);
        assert!((fmr.low - low).abs() < 1e-12 && (fmr.high - high).abs() < 1e-12);
        assert!(fmr.high - fmr.low < from_joint.high - from_joint.low);
        assert!(table(&h).contains("both eyes below the threshold: 7 0.0070"));
    }

    #[test]
    fn the_matching_count_combines_both_readings_by_their_noise() {
        let v = 100.0;
        let noisy = false_match_rate(&opened(v)).expect("enough pairs");
        let (low, high) = wilson_with_noise(0.002, 1000, 9.0 * 16.0 / 25.0 * v, Z95);
        assert!((noisy.low - low).abs() < 1e-12 && (noisy.high - high).abs() < 1e-12);
        // Noise that makes the readings disagree: 10 more below, the complement unchanged.
        let mut h = opened(v);
        for g in &mut h.histograms {
            if g.population == Population::Impostor && g.comparison == Comparison::Joint {
                g.counts[0] += 10;
            }
        }
        let fmr = false_match_rate(&h).expect("enough pairs");
        let expected = (16.0 * 12.0 + 9.0 * 2.0) / 25.0 / 1000.0;
        assert!((fmr.rate - expected).abs() < 1e-12, "{}", fmr.rate);
    }

    #[test]
    fn a_negative_noisy_count_stays_in_the_estimate_and_the_interval_in_range() {
        let mut h = opened(25.0);
        let e = EDGES.len();
        for g in &mut h.histograms {
            if g.population == Population::Impostor && g.comparison == Comparison::Joint {
                g.counts[2 * e + 2] = -3;
            }
        }
        // Both readings agree on -3: the complement of the 998 above is -3 of 995 pairs.
        h.impostor_pairs = 995;
        let fmr = false_match_rate(&h).expect("enough pairs");
        assert!((fmr.rate + 3.0 / 995.0).abs() < 1e-12, "{}", fmr.rate);
        assert!(fmr.low >= 0.0 && fmr.high > 0.0 && fmr.high <= 1.0);
    }

    #[test]
    fn the_table_shows_counts_fractions_the_threshold_and_the_grid() {
        let mut h = opened(36.0);
        h.histograms[0].counts[1] = -2;
        let text = table(&h);
        assert!(text.contains("impostor pairs: 1000"), "{text}");
        assert!(text.contains("noise standard deviation 6.0 per count"));
        // The impostor left row at [0.300, 0.400): 95 of 1000.
        let row = text
            .lines()
            .find(|l| l.starts_with("[0.300, 0.400)"))
            .expect("a row per bucket");
        assert!(row.contains("95   0.0950"), "{row}");
        // A negative count is shown as opened; its fraction is clamped.
        let row = text
            .lines()
            .find(|l| l.starts_with("[0.100, 0.200)"))
            .expect("a row per bucket");
        assert!(row.contains("-2   0.0000"), "{row}");
        assert_eq!(text.matches("-- threshold 0.300 ").count(), 3);
        assert!(text.contains(">= 0.400"));
        // The joint grid: the impostor row from 0.400 ends in 995.
        assert!(
            text.lines()
                .any(|l| l.starts_with("  .400") && l.trim_end().ends_with("995")),
            "{text}"
        );
    }

    #[test]
    fn the_svg_is_well_formed_and_marks_the_threshold() {
        let mut h = opened(36.0);
        h.histograms[0].counts[0] = -5;
        let text = svg(&h);
        let doc = roxmltree::Document::parse(&text).expect("well-formed XML");
        let root = doc.root_element();
        assert_eq!(root.tag_name().name(), "svg");
        assert_eq!(
            root.tag_name().namespace(),
            Some("http://www.w3.org/2000/svg")
        );
        // Nothing external: no links, scripts, images or font files.
        for node in doc.descendants().filter(|n| n.is_element()) {
            assert!(
                !["script", "image", "a", "style", "foreignObject"]
                    .contains(&node.tag_name().name()),
                "{}",
                node.tag_name().name()
            );
            assert!(node.attributes().all(|a| !a.value().contains("url(")));
        }
        let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
        assert!(texts.contains(&"threshold 0.300"));
        // Nine lines: three populations by left, right and mirrored, a panel each.
        let paths = doc
            .descendants()
            .filter(|n| n.has_tag_name("path") && n.attribute("stroke-width").is_some())
            .count();
        assert_eq!(paths, 9);
        for title in [
            "impostor: 1000 pairs",
            "genuine: 100 pairs",
            "reauthentication: 100 pairs",
        ] {
            assert!(texts.contains(&title), "{title}");
        }
        assert!(texts.contains(&"mirrored"));
        // A negative count is drawn at zero, a band above the scale at its top: every point
        // lies within the chart.
        let height = chart_height(3);
        for node in doc.descendants().filter(|n| n.has_tag_name("path")) {
            let d = node.attribute("d").expect("a path");
            for number in d.split(|c: char| c == ' ' || c.is_ascii_alphabetic()) {
                if let Ok(v) = number.parse::<f64>() {
                    assert!((0.0..=height.max(WIDTH)).contains(&v), "{v} in {d}");
                }
            }
        }
        // The noise band: 2 sd of one count (6 here) over the population's pairs and the
        // bucket's width (0.1): 0.12 for the 1000 impostor pairs, ten times that for 100.
        let drawn = panels(&h);
        assert!(
            (drawn[0].band[0] - 0.12).abs() < 1e-12,
            "{}",
            drawn[0].band[0]
        );
        assert!(
            (drawn[1].band[0] - 1.2).abs() < 1e-12,
            "{}",
            drawn[1].band[0]
        );
        let bands: Vec<&str> = doc
            .descendants()
            .filter(|n| n.has_tag_name("path") && n.attribute("fill") == Some("#e5e7e9"))
            .filter_map(|n| n.attribute("d"))
            .collect();
        assert_eq!(bands.len(), 3);
        // A population without pairs draws no line.
        h.genuine_pairs = 0;
        let without = svg(&h);
        assert_eq!(without.matches("genuine").count(), 0);
        assert!(without.contains(&format!(r#"height="{}""#, chart_height(2))));
    }
}
