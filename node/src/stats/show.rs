//! What `ocelli-node stats` prints.

use super::report::{false_match_rate, false_non_match_rate, table, RateEstimate};
use super::OpenedHistograms;

fn rate_json(r: Option<RateEstimate>) -> serde_json::Value {
    r.map_or(
        serde_json::Value::Null,
        |r| serde_json::json!({ "rate": r.rate, "low": r.low, "high": r.high, "pairs": r.pairs }),
    )
}

fn rate_line(name: &str, r: Option<RateEstimate>) -> String {
    match r {
        Some(r) => format!(
            "{name} at the threshold: {:.3e} (95 % interval {:.3e} to {:.3e}, {} pairs)\n",
            r.rate, r.low, r.high, r.pairs
        ),
        None => format!("{name} at the threshold: no pairs\n"),
    }
}

/// One JSON object: the opened histograms and the two rates.
pub fn json(h: &OpenedHistograms) -> serde_json::Value {
    serde_json::json!({
        "histograms": h,
        "false_match_rate": rate_json(false_match_rate(h)),
        "false_non_match_rate": rate_json(false_non_match_rate(h)),
    })
}

/// The table and the two rates, as text.
pub fn text(h: &OpenedHistograms) -> String {
    let mut out = table(h);
    out.push_str(&rate_line("false match rate", false_match_rate(h)));
    out.push_str(&rate_line("false non-match rate", false_non_match_rate(h)));
    out
}

/// What is printed where no period has opened (or not the one asked for).
pub fn none_opened(period: Option<u64>) -> String {
    match period {
        Some(p) => format!("period {p} has not opened (or is not in this store)"),
        None => "no statistics period has opened yet: one opens once it has stats.period_batches \
                 batches, stats.period_s seconds and stats.min_pairs impostor pairs"
            .to_owned(),
    }
}
