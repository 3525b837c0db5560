//! The statistics of one batch, in its MPC session after the matching: choose the pairs,
//! count them into this party's share of the period, and open the period when it is due.

use ocelli_mpc::db::MatchDb;
use ocelli_mpc::requests::{Outcome, PublicRequest};
use ocelli_mpc::session::Session;
use ocelli_mpc::share::Replicated;
use ocelli_mpc::stats::{accumulate, count_pairs, joint_seed, open_noisy, skellam, CountLayout};
use ocelli_mpc::{Backend, NetworkError, Transport};
use rand_core::OsRng;
use sdk_orb::shamir::PartyShares;

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
    let seed = joint_seed(session)?;
    let chosen = choose_pairs(
        &seed,
        public,
        outcomes,
        db.serial_ids(),
        &slot.period,
        config.sample_pairs,
    );
    let mut period = chosen.period;
    let n = CountLayout {
        edges: config.edges.len(),
    }
    .counts();
    if period.counts.len() != 2 * n {
        period.counts = vec![0; 2 * n];
    }
    let mut total = Replicated::new(period.counts[..n].to_vec(), period.counts[n..].to_vec());
    if !chosen.pairs.is_empty() {
        let coefficients: Vec<u32> = config
            .edges
            .iter()
            .map(|&e| sdk_orb::plaintext::threshold_coefficient(e))
            .collect();
        let counts = count_pairs(session, engine, shares, db, &chosen.pairs, &coefficients)?;
        accumulate(&mut total, &counts);
    }
    if !due(&period, config, slot.now_unix_s) {
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
