//! The statistics of one batch, in its MPC session after the matching: choose the pairs,
//! count them into this party's share of the period, and open the period when it is due.

use ocelli_mpc::db::MatchDb;
use ocelli_mpc::requests::{Outcome, PublicRequest};
use ocelli_mpc::session::Session;
use ocelli_mpc::share::Replicated;
use ocelli_mpc::stats::{accumulate, count_pairs, joint_seed, open_noisy, skellam, CountLayout};
use ocelli_mpc::{Backend, NetworkError, Peer, Transport};
use prost::Message;
use rand_core::OsRng;
use sdk_orb::shamir::PartyShares;
use sha2::{Digest, Sha256};

use super::period::{choose_pairs, due, opened, sensitivity};
use crate::config::StatsConfig;
use crate::stats::privacy::party_skellam_mu;
use crate::store::period::{StatsPeriod, StatsWrite};

/// What a batch's statistics start from, and where their result goes.
#[derive(Debug)]
pub struct StatsSlot {
    /// The period before the batch (a fresh one where none is stored).
    pub period: StatsPeriod,
    /// The settings.
    pub config: StatsConfig,
    /// The matching threshold.
    pub threshold: f64,
    /// The batch.
    pub batch_id: u64,
    /// The batch's agreed time, Unix seconds.
    pub now_unix_s: u64,
    /// The period after the batch, once counted.
    pub output: std::sync::Mutex<Option<StatsWrite>>,
}

/// u32 words of a party's share of the counts with `edges` edges: two components per count.
pub fn count_words(edges: usize) -> usize {
    2 * CountLayout { edges }.counts()
}

/// Counts the batch's pairs into `slot.period` and opens it when due. Every party calls it
/// with the same public data; `shares[i]` is this party's share of request `i`.
///
/// # Errors
/// Transport failures.
pub fn count_batch<B: Backend, T: Transport>(
    session: &mut Session<'_, T>,
    engine: &B,
    slot: &StatsSlot,
    public: &[PublicRequest],
    outcomes: &[Outcome],
    shares: &[&PartyShares],
    db: &MatchDb,
) -> Result<StatsWrite, NetworkError> {
    let config = &slot.config;
    let start = in_layout(agreed_period(session, slot)?, slot);
    let seed = joint_seed(session)?;
    let chosen = choose_pairs(
        &seed,
        public,
        outcomes,
        db.serial_ids(),
        &start,
        config.sample_pairs,
    );
    let mut period = chosen.period;
    let n = CountLayout {
        edges: config.edges.len(),
    }
    .counts();
    let mut total = Replicated::new(period.counts[..n].to_vec(), period.counts[n..].to_vec());
    if !chosen.pairs.is_empty() {
        let coefficients: Vec<u32> = config
            .edges
            .iter()
            .map(|&e| sdk_orb::plaintext::threshold_coefficient(e))
            .collect();
        // The settings' check holds the threshold among the edges.
        let threshold_edge = crate::stats::edge_index(&config.edges, slot.threshold).unwrap_or(0);
        let counts = count_pairs(
            session,
            engine,
            shares,
            db,
            &chosen.pairs,
            &coefficients,
            threshold_edge,
        )?;
        accumulate(&mut total, &counts);
    }
    if !due(&period, config, slot.now_unix_s, db.serial_ids().len()) {
        period.counts = [total.own, total.prev].concat();
        return Ok(StatsWrite {
            period,
            opened: None,
        });
    }
    let mu = party_skellam_mu(config.epsilon, config.delta, &sensitivity(&period));
    let noise = skellam(&mut OsRng, mu, n);
    let counts = open_noisy(session, &total, &noise)?;
    let histograms = opened(
        &period,
        slot.batch_id,
        slot.now_unix_s,
        config,
        slot.threshold,
        6.0 * mu,
        &counts,
    );
    Ok(StatsWrite {
        period: StatsPeriod::begin(period.period + 1, slot.batch_id + 1, slot.now_unix_s, 2 * n),
        opened: Some(histograms),
    })
}

/// The period's number and a digest of everything about it the three parties must hold alike
/// (all but this party's share of the counts).
fn public_words(period: &StatsPeriod) -> [u64; 5] {
    let public = StatsPeriod {
        counts: Vec::new(),
        ..period.clone()
    };
    let digest = Sha256::digest(public.encode_to_vec());
    let mut words = [period.period, 0, 0, 0, 0];
    for (w, chunk) in words[1..].iter_mut().zip(digest.chunks_exact(8)) {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        *w = u64::from_le_bytes(b);
    }
    words
}

/// The period the batch counts into, the same at the three parties. A party that applied a
/// batch without counting it (a restart between evaluation and apply, outcomes taken from its
/// peers) holds another period than the two others, and pairs chosen from it would differ.
/// So the parties first exchange the period's public digest (one round); where any differs,
/// all three drop the period's counts unopened and begin a new one at this batch, numbered
/// past the highest of theirs.
fn agreed_period<T: Transport>(
    session: &mut Session<'_, T>,
    slot: &StatsSlot,
) -> Result<StatsPeriod, NetworkError> {
    let mine = public_words(&slot.period);
    session.round();
    session.send(Peer::Next, &mine)?;
    session.send(Peer::Prev, &mine)?;
    let next: Vec<u64> = session.recv(Peer::Next, mine.len())?;
    let prev: Vec<u64> = session.recv(Peer::Prev, mine.len())?;
    if next[..] == mine[..] && prev[..] == mine[..] {
        return Ok(slot.period.clone());
    }
    let period = mine[0].max(next[0]).max(prev[0]) + 1;
    tracing::warn!(
        batch = slot.batch_id,
        dropped_period = slot.period.period,
        period,
        "statistics periods differ between the parties; a new period begins"
    );
    Ok(StatsPeriod::begin(
        period,
        slot.batch_id,
        slot.now_unix_s,
        count_words(slot.config.edges.len()),
    ))
}

/// `period`, or, where it was counted under other edges or another count layout (a settings
/// change, an upgrade), a new period begun at this batch: its counts cannot go on, and opened
/// with the pairs counted since they would misstate them. The three parties agreed on the
/// period and hold the same settings, so all three begin the same new one.
fn in_layout(period: StatsPeriod, slot: &StatsSlot) -> StatsPeriod {
    let words = count_words(slot.config.edges.len());
    if period.counts.len() == words {
        return period;
    }
    tracing::warn!(
        batch = slot.batch_id,
        dropped_period = period.period,
        "the statistics' count layout changed; a new period begins"
    );
    StatsPeriod::begin(period.period + 1, slot.batch_id, slot.now_unix_s, words)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ocelli_mpc::local::run_three;

    fn slot(period: StatsPeriod) -> StatsSlot {
        StatsSlot {
            period,
            config: StatsConfig::default(),
            threshold: sdk_orb::plaintext::DEFAULT_THRESHOLD,
            batch_id: 40,
            now_unix_s: 1_800_000_000,
            output: std::sync::Mutex::new(None),
        }
    }

    fn held(n: u64) -> StatsPeriod {
        let mut p = StatsPeriod::begin(n, 10, 1_799_000_000, count_words(22));
        p.batches = 30;
        p.used_rows = vec![3, 8];
        p
    }

    /// Alike public state: the period goes on, whatever the count shares hold.
    #[test]
    fn parties_with_the_same_period_keep_it() {
        let results = run_three(7, |s| {
            let mut p = held(2);
            p.counts[0] = u32::from(s.party().get());
            agreed_period(s, &slot(p)).expect("round")
        });
        for (party, (p, _, _)) in results.iter().enumerate() {
            assert_eq!((p.period, p.first_batch, p.batches), (2, 10, 30));
            assert_eq!(p.counts[0] as usize, party);
        }
    }

    /// A period counted under another layout (here the one before the matching count) is
    /// dropped for a new one at this batch; one in the current layout goes on.
    #[test]
    fn a_period_counted_under_another_layout_begins_anew() {
        let mut old = held(2);
        old.counts = vec![5; count_words(22) - 6];
        old.impostor_pairs = 700;
        let p = in_layout(old, &slot(held(2)));
        assert_eq!(
            (p.period, p.first_batch, p.batches, p.impostor_pairs),
            (3, 40, 0, 0)
        );
        assert_eq!(p.counts, vec![0; count_words(22)]);
        assert!(p.used_rows.is_empty());
        let kept = in_layout(held(2), &slot(held(2)));
        assert_eq!(kept, held(2));
    }

    /// One party missed a batch: all three begin the same new period at this batch.
    #[test]
    fn a_party_that_missed_a_batch_makes_all_three_begin_anew() {
        let results = run_three(7, |s| {
            let mut p = held(if s.party().get() == 2 { 3 } else { 2 });
            if s.party().get() == 1 {
                p.batches = 29;
            }
            agreed_period(s, &slot(p)).expect("round")
        });
        for (p, _, _) in &results {
            assert_eq!((p.period, p.first_batch, p.batches), (4, 40, 0));
            assert!(p.used_rows.is_empty());
            assert!(p.counts.iter().all(|&c| c == 0));
        }
    }
}
