//! A statistics period on the node: which pairs a batch counts, when a period opens, and the
//! opened record. Pure functions of agreed data (request types, opened decisions, the joint
//! seed, the stored period), so the three nodes choose alike.

use ocelli_mpc::requests::{Outcome, PublicRequest};
use ocelli_mpc::stats::{sample_impostor_pairs, CountLayout, Population as Pop, StatsPair};
use sdk_orb::RequestType;

use crate::config::StatsConfig;
use crate::stats::privacy::Sensitivity;
use crate::stats::{Comparison, Histogram, OpenedHistograms, Population};
use crate::store::period::StatsPeriod;

/// The pairs one batch counts and the period after them (its count shares unchanged).
#[derive(Clone, Debug, PartialEq)]
pub struct BatchPairs {
    /// The pairs, queries by request position, rows by database row.
    pub pairs: Vec<StatsPair>,
    /// The period with the batch's pairs, rows and `m` added.
    pub period: StatsPeriod,
}

/// Whether a request's template is in the statistics: the kinds that carry an iris and were
/// evaluated.
fn counted(r: &PublicRequest, o: &Outcome) -> bool {
    matches!(
        r.request_type,
        RequestType::Uniqueness | RequestType::UniquenessCheck | RequestType::Reauth
    ) && !matches!(o, Outcome::Malformed | Outcome::NotEvaluated)
}

/// Adds `serial` to the increasing set `set`; `false` if it was there.
fn insert(set: &mut Vec<u64>, serial: u64) -> bool {
    match set.binary_search(&serial) {
        Ok(_) => false,
        Err(at) => {
            set.insert(at, serial);
            true
        }
    }
}

/// The pairs of a batch: the impostor sample drawn from `seed` over the counted requests and
/// the rows not yet sampled this period; each request's first matched enrolled entry
/// (genuine; none in the privacy-max mode, whose decisions name no entry); each
/// re-authentication against the entry it names. An entry is in at most one pair of each
/// population per period. `serial_ids` holds the database's serial id by row (increasing).
pub fn choose_pairs(
    seed: &[u8; 32],
    public: &[PublicRequest],
    outcomes: &[Outcome],
    serial_ids: &[u64],
    period: &StatsPeriod,
    sample_pairs: usize,
) -> BatchPairs {
    let mut next = period.clone();
    let row_of = |serial: u64| serial_ids.binary_search(&serial).ok();
    let queries: Vec<usize> = (0..public.len())
        .filter(|&i| counted(&public[i], &outcomes[i]))
        .collect();
    let used = |row: usize| period.used_rows.binary_search(&serial_ids[row]).is_ok();
    let impostor =
        sample_impostor_pairs(seed, queries.len(), serial_ids.len(), sample_pairs, &used);
    let mut pairs: Vec<StatsPair> = impostor
        .iter()
        .map(|&(q, row)| StatsPair {
            query: queries[q],
            row,
            population: Pop::Impostor,
        })
        .collect();
    for p in &pairs {
        insert(&mut next.used_rows, serial_ids[p.row]);
    }
    if !impostor.is_empty() {
        let m = impostor.len().div_ceil(queries.len()) as u64;
        next.max_pairs_per_template = next.max_pairs_per_template.max(m);
    }
    next.impostor_pairs += impostor.len() as u64;
    for &i in &queries {
        let (target, population, rows) = match (&outcomes[i], public[i].request_type) {
            (Outcome::Match { entries, .. }, _) => (
                entries.first().map(|s| s.0),
                Pop::Genuine,
                &mut next.genuine_rows,
            ),
            (Outcome::Reauth(_), RequestType::Reauth) => (
                Some(public[i].serial_id.0),
                Pop::Reauthentication,
                &mut next.reauthentication_rows,
            ),
            _ => continue,
        };
        let Some((serial, row)) = target.and_then(|s| Some((s, row_of(s)?))) else {
            continue;
        };
        if insert(rows, serial) {
            pairs.push(StatsPair {
                query: i,
                row,
                population,
            });
            match population {
                Pop::Genuine => next.genuine_pairs += 1,
                _ => next.reauthentication_pairs += 1,
            }
        }
    }
    next.batches += 1;
    BatchPairs {
        pairs,
        period: next,
    }
}

/// Whether `period` opens now: enough batches, enough time since it began (agreed times) and
/// enough impostor pairs, all three. A row enters one impostor pair per period, so once every
/// one of the `enrolled` rows has, the sample is as large as it can be and counts as enough.
pub fn due(period: &StatsPeriod, config: &StatsConfig, now_unix_s: u64, enrolled: usize) -> bool {
    let sampled_all = enrolled > 0 && period.used_rows.len() >= enrolled;
    period.batches >= config.period_batches
        && now_unix_s.saturating_sub(period.started_at_unix_s) >= config.period_s
        && (period.impostor_pairs >= config.min_pairs || sampled_all)
}

/// How far one template moves `period`'s counts: at most the most impostor pairs one request
/// got in the period (public), in each of the histograms of every population it can enter
/// (an enrolled row enters all three).
pub fn sensitivity(period: &StatsPeriod) -> Sensitivity {
    Sensitivity {
        max_pairs_per_template: period.max_pairs_per_template.max(1),
        histograms_per_pair: ocelli_mpc::stats::Comparison::ALL.len() as u64
            * Sensitivity::POPULATIONS,
    }
}

impl From<ocelli_mpc::stats::Comparison> for Comparison {
    fn from(c: ocelli_mpc::stats::Comparison) -> Self {
        use ocelli_mpc::stats::Comparison as C;
        match c {
            C::Left => Comparison::Left,
            C::Right => Comparison::Right,
            C::Joint => Comparison::Joint,
            C::MirroredLeft => Comparison::MirroredLeft,
            C::MirroredRight => Comparison::MirroredRight,
            C::Matching => Comparison::Matching,
        }
    }
}

impl From<Pop> for Population {
    fn from(p: Pop) -> Self {
        match p {
            Pop::Impostor => Population::Impostor,
            Pop::Genuine => Population::Genuine,
            Pop::Reauthentication => Population::Reauthentication,
        }
    }
}

/// What a period opens, from its opened noisy `counts` (in [`CountLayout`] order).
///
/// # Panics
/// If `counts` does not hold one count per bucket of every histogram.
pub fn opened(
    period: &StatsPeriod,
    last_batch: u64,
    opened_at_unix_s: u64,
    config: &StatsConfig,
    threshold: f64,
    noise_variance: f64,
    counts: &[i64],
) -> OpenedHistograms {
    let layout = CountLayout {
        edges: config.edges.len(),
    };
    assert_eq!(counts.len(), layout.counts(), "one count per bucket");
    let mut histograms = Vec::new();
    for population in Pop::ALL {
        for comparison in ocelli_mpc::stats::Comparison::ALL {
            let at = layout.offset(population, comparison);
            histograms.push(Histogram {
                population: population.into(),
                comparison: comparison.into(),
                counts: counts[at..at + layout.len(comparison)].to_vec(),
            });
        }
    }
    OpenedHistograms {
        period: period.period,
        first_batch: period.first_batch,
        last_batch,
        opened_at_unix_s,
        edges: config.edges.clone(),
        threshold,
        epsilon: config.epsilon,
        delta: config.delta,
        noise_variance,
        impostor_pairs: period.impostor_pairs,
        genuine_pairs: period.genuine_pairs,
        reauthentication_pairs: period.reauthentication_pairs,
        histograms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ocelli_mpc::requests::SerialId;

    fn request(t: RequestType, serial: u64) -> PublicRequest {
        PublicRequest {
            request_type: t,
            serial_id: SerialId(serial),
            or_policy: false,
            or_serial_ids: Vec::new(),
        }
    }

    fn matched(serials: &[u64]) -> Outcome {
        Outcome::Match {
            entries: serials.iter().map(|&s| SerialId(s)).collect(),
            earlier: Vec::new(),
        }
    }

    /// Genuine pairs are the first matched entry, re-authentications the entry named, each
    /// entry at most once per population and period; malformed requests, deletions and the
    /// privacy-max mode's anonymous matches count nothing.
    #[test]
    fn genuine_and_reauthentication_pairs_follow_the_decisions() {
        let serials = [3, 5, 8, 13];
        let public = [
            request(RequestType::Uniqueness, 0),
            request(RequestType::Uniqueness, 0),
            request(RequestType::Reauth, 8),
            request(RequestType::Reauth, 8),
            request(RequestType::UniquenessCheck, 0),
            request(RequestType::Deletion, 5),
            request(RequestType::Uniqueness, 0),
            request(RequestType::Reauth, 99),
        ];
        let outcomes = [
            matched(&[5, 13]),
            matched(&[5]),
            Outcome::Reauth(false),
            Outcome::Reauth(true),
            matched(&[]),
            Outcome::Apply,
            Outcome::Malformed,
            Outcome::Reauth(false),
        ];
        let start = StatsPeriod::begin(0, 1, 100, 0);
        let b = choose_pairs(&[7; 32], &public, &outcomes, &serials, &start, 0);
        assert_eq!(
            b.pairs,
            vec![
                StatsPair {
                    query: 0,
                    row: 1,
                    population: Pop::Genuine
                },
                StatsPair {
                    query: 2,
                    row: 2,
                    population: Pop::Reauthentication
                },
            ]
        );
        assert_eq!(
            (b.period.genuine_pairs, b.period.reauthentication_pairs),
            (1, 1)
        );
        assert_eq!(b.period.genuine_rows, vec![5]);
        assert_eq!(b.period.reauthentication_rows, vec![8]);
        assert_eq!(b.period.batches, 1);
        // The same entries again later in the period: nothing.
        let again = choose_pairs(&[7; 32], &public, &outcomes, &serials, &b.period, 0);
        assert!(again.pairs.is_empty());
        assert_eq!(again.period.batches, 2);
    }

    /// Impostor rows are never sampled twice in a period, queries are the counted requests
    /// only, and `m` is the most pairs one request got.
    #[test]
    fn impostor_rows_are_used_once_per_period() {
        let serials: Vec<u64> = (1..=10).collect();
        let public = [
            request(RequestType::Uniqueness, 0),
            request(RequestType::Deletion, 4),
            request(RequestType::UniquenessCheck, 0),
        ];
        let outcomes = [Outcome::Unique, Outcome::Apply, Outcome::Unique];
        let mut period = StatsPeriod::begin(0, 1, 100, 0);
        let mut seen = Vec::new();
        for batch in 0..2u8 {
            let b = choose_pairs(&[batch; 32], &public, &outcomes, &serials, &period, 5);
            assert_eq!(b.pairs.len(), 5);
            for p in &b.pairs {
                assert_eq!(p.population, Pop::Impostor);
                assert!(p.query == 0 || p.query == 2, "a deletion is no query");
                assert!(!seen.contains(&p.row), "row {} sampled twice", p.row);
                seen.push(p.row);
            }
            period = b.period;
        }
        assert_eq!(period.impostor_pairs, 10);
        assert_eq!(period.used_rows, serials);
        assert_eq!(period.max_pairs_per_template, 3);
        let spent = choose_pairs(&[9; 32], &public, &outcomes, &serials, &period, 5);
        assert!(spent.pairs.is_empty());
    }

    /// A period opens only once it has the batches, the time and the pairs.
    #[test]
    fn a_period_opens_when_all_three_are_reached() {
        let config = StatsConfig {
            period_batches: 3,
            period_s: 60,
            min_pairs: 100,
            ..StatsConfig::default()
        };
        let mut p = StatsPeriod::begin(0, 1, 1_000, 0);
        p.batches = 3;
        p.impostor_pairs = 100;
        assert!(due(&p, &config, 1_060, 1_000));
        assert!(!due(&p, &config, 1_059, 1_000));
        p.batches = 2;
        assert!(!due(&p, &config, 5_000, 1_000));
        p.batches = 3;
        p.impostor_pairs = 99;
        assert!(!due(&p, &config, 5_000, 1_000));
        // Fewer enrolled than min_pairs: the period opens once each has been sampled.
        p.used_rows = (1..=99).collect();
        assert!(due(&p, &config, 5_000, 99));
        assert!(!due(&p, &config, 5_000, 100));
    }

    /// The count vector is cut into the histograms in the core's layout.
    #[test]
    fn opened_counts_land_in_their_histograms() {
        let config = StatsConfig {
            edges: vec![0.0, 0.2, 0.345],
            ..StatsConfig::default()
        };
        let layout = CountLayout { edges: 3 };
        let counts: Vec<i64> = (0..layout.counts() as i64).collect();
        let p = StatsPeriod::begin(4, 10, 1_000, 0);
        let h = opened(&p, 12, 2_000, &config, 0.345, 6.0, &counts);
        assert_eq!(h.histograms.len(), 18);
        let joint = h
            .histogram(Population::Genuine, Comparison::Joint)
            .map(|h| h.counts.clone());
        let at = layout.offset(Pop::Genuine, ocelli_mpc::stats::Comparison::Joint) as i64;
        assert_eq!(joint, Some((at..at + 9).collect()));
        let mirrored = h.histogram(Population::Reauthentication, Comparison::MirroredRight);
        assert_eq!(
            mirrored.map(|h| h.counts.last().copied()),
            Some(Some(counts[counts.len() - 2]))
        );
        let last = h.histogram(Population::Reauthentication, Comparison::Matching);
        assert_eq!(
            last.map(|h| h.counts.clone()),
            Some(vec![*counts.last().expect("counts")])
        );
        assert_eq!((h.period, h.first_batch, h.last_batch), (4, 10, 12));
    }
}
