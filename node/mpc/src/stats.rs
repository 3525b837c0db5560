//! Distance statistics: bucket counts of the fractional Hamming distance (the minimum over
//! the 31 rotations, as the decision takes it) of chosen (query, database row) pairs,
//! counted as replicated shares over Z_{2^32} and opened with noise no single party knows.
//! Nothing per pair is ever opened.
//!
//! Counting ([`count_pairs`]), for `P` pairs and `E` bucket edges `e_0 < ... < e_{E-1}`:
//!
//! - Dot products of each pair's 31 rotations, both eyes, for the query and its mirror
//!   ([`sdk_orb::mirror`]), on the [`Backend`]: `4 * 31 * P` pairs of `(cd, md)`.
//! - Cumulative bits: for each of those four comparisons and each edge `e_j`, `j >= 1`, the
//!   bit `min over rotations d < e_j`, the OR over the rotations of the strict match bit at
//!   `A_j = threshold_coefficient(e_j)` (the decision's own rule). All `4 * 31 * (E - 1) * P`
//!   comparisons run as one [`match_bits_at_each`] (10 rounds; the split and the lift's cross
//!   term once per `(cd, md)`, not per edge), then one OR tree (5 rounds). `e_0` needs no
//!   bit: bucket 0 also holds the distances below it.
//! - Joint: the AND of each left bit at `e_j` with each right bit at `e_k`, `(E - 1)^2 * P`
//!   gates in one round.
//! - B2A: each XOR-shared bit `b = c_0 ^ c_1 ^ c_2` becomes an arithmetic share by
//!   `t = c_0 + c_1 - 2 c_0 c_1`, `b = t + c_2 - 2 t c_2` (two multiplication rounds over
//!   Z_{2^32}, every bit at once).
//! - Buckets: per population, sums over its pairs (local); bucket `i` is the difference of
//!   the cumulative counts at `e_{i+1}` and `e_i` (the count of the population's pairs above
//!   the last edge, a public number, closes the last bucket); the joint buckets are second
//!   differences of the 2D cumulative counts. All linear, so local.
//!
//! Rounds: 18. Bytes each party sends per pair: 124 `(cd, md)` pairs at 6 bytes (parties 0
//! and 2) or 2 (party 1), `124 (E - 1)` comparisons at 7.75 bytes (the adder) plus 4 at
//! party 1 (its binary input), `120 (E - 1) / 8` for the OR tree (30 gates per bit),
//! `(E - 1)^2 / 8` for the joint AND and `8 (4 (E - 1) + (E - 1)^2)` for the B2A. With 22
//! edges: about 25 KB at parties 0 and 2 and 35 KB at party 1.
//!
//! Opening ([`open_noisy`]): the replicated counts become a fresh three-out-of-three additive
//! sharing, re-randomised by a zero-sharing from the pairwise streams, so a neighbour that
//! holds a party's replicated component learns nothing from its additive share; each party
//! adds its own noise ([`skellam`], drawn from its own randomness) and sends the sum to both
//! others. One round, 8 bytes per count from each party.
//!
//! The pairs: the impostor sample is drawn by [`sample_impostor_pairs`] from a seed no party
//! picks ([`joint_seed`], opened from the pairwise streams).
//!
//! Differences from the interface first agreed: `count_pairs` takes the queries as each
//! request's shares (`queries[StatsPair::query]`) and prepares them itself, as the pipeline
//! does not keep its prepared queries past a batch; `edge_coefficients` holds one
//! coefficient per edge, `e_0`'s included (it is not compared); the core has its own
//! [`Comparison`] beside [`Population`] for [`CountLayout::offset`]; [`accumulate`] adds a
//! batch's counts to a period's, and `Replicated::to_bytes` / `from_bytes` keep them.

use std::collections::{BTreeMap, HashSet};

use rand_chacha::ChaCha20Rng;
use rand_core::{CryptoRng, RngCore, SeedableRng};
use sdk_orb::rotation::{rotate_coefs, rotations, ROTATION_COUNT};
use sdk_orb::shamir::PartyShares;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use crate::backend::Backend;
use crate::bits::words_for;
use crate::circuit::SharedBits;
use crate::compare::{match_bits_at_each, or_blocks};
use crate::db::{Eye, MatchDb, Part};
use crate::network::{NetworkError, Peer, Transport};
use crate::pipeline::QueryMatrix;
use crate::scratch::ScratchPool;
use crate::session::Session;
use crate::share::Replicated;

/// Domain of the hash that turns the opened stream words into [`joint_seed`]'s seed.
pub const SEED_DOMAIN: &[u8] = b"ocelli/stats-seed/v1";

/// Which pairs a histogram counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Population {
    /// A uniform sample of (request, enrolled person) pairs.
    Impostor,
    /// Pairs that matched.
    Genuine,
    /// Re-authentications against the person they name.
    Reauthentication,
}

impl Population {
    /// Every population, in the order of [`CountLayout`].
    pub const ALL: [Population; 3] = [
        Population::Impostor,
        Population::Genuine,
        Population::Reauthentication,
    ];

    /// Position in [`Population::ALL`].
    pub const fn index(self) -> usize {
        match self {
            Population::Impostor => 0,
            Population::Genuine => 1,
            Population::Reauthentication => 2,
        }
    }
}

/// Which comparison of a pair a histogram counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Comparison {
    /// The left eyes.
    Left,
    /// The right eyes.
    Right,
    /// Both eyes, left bucket by right bucket (row-major, the left bucket the row).
    Joint,
    /// The mirrored query's left eye against the row's left eye: the request's right eye
    /// mirrored ([`sdk_orb::mirror::mirror_person`] swaps the eyes, as a mirrored capture
    /// does).
    MirroredLeft,
    /// The mirrored query's right eye (the request's left, mirrored) against the row's right.
    MirroredRight,
    /// One count: the pairs with both eyes below the matching threshold, the decision's
    /// rule. The joint histogram holds it as the sum of its cells below the threshold, each
    /// with its own noise; opened alone it carries one count's noise.
    Matching,
}

impl Comparison {
    /// Every comparison, in the order of [`CountLayout`].
    pub const ALL: [Comparison; 6] = [
        Comparison::Left,
        Comparison::Right,
        Comparison::Joint,
        Comparison::MirroredLeft,
        Comparison::MirroredRight,
        Comparison::Matching,
    ];
}

/// Where each count lies in the vector [`count_pairs`] returns: for each population in
/// [`Population::ALL`] order, Left (`E`), Right (`E`), Joint (`E * E`), MirroredLeft (`E`),
/// MirroredRight (`E`), Matching (1), `E` the number of edges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CountLayout {
    /// Bucket edges (one bucket per edge).
    pub edges: usize,
}

impl CountLayout {
    /// Counts of one population.
    fn per_population(&self) -> usize {
        4 * self.edges + self.edges * self.edges + 1
    }

    /// Counts in all: `3 (4 E + E^2 + 1)`.
    pub fn counts(&self) -> usize {
        Population::ALL.len() * self.per_population()
    }

    /// Counts of one histogram: `E`, `E^2` for [`Comparison::Joint`], 1 for
    /// [`Comparison::Matching`].
    pub fn len(&self, comparison: Comparison) -> usize {
        match comparison {
            Comparison::Joint => self.edges * self.edges,
            Comparison::Matching => 1,
            _ => self.edges,
        }
    }

    /// Whether there are no edges.
    pub fn is_empty(&self) -> bool {
        self.edges == 0
    }

    /// Where one histogram starts.
    pub fn offset(&self, population: Population, comparison: Comparison) -> usize {
        let e = self.edges;
        population.index() * self.per_population()
            + match comparison {
                Comparison::Left => 0,
                Comparison::Right => e,
                Comparison::Joint => 2 * e,
                Comparison::MirroredLeft => 2 * e + e * e,
                Comparison::MirroredRight => 3 * e + e * e,
                Comparison::Matching => 4 * e + e * e,
            }
    }
}

/// One pair to count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatsPair {
    /// The query: an index into [`count_pairs`]' `queries`.
    pub query: usize,
    /// The database row.
    pub row: usize,
    /// Which histograms it counts in.
    pub population: Population,
}

/// A seed the three parties share and none of them chose: 256 bits XOR-shared from the
/// pairwise streams (each party's component drawn from its stream with the next party),
/// opened, and hashed under [`SEED_DOMAIN`]. One round; draws 4 u64 from each stream.
///
/// # Errors
/// Transport failures.
pub fn joint_seed<T: Transport>(session: &mut Session<'_, T>) -> Result<[u8; 32], NetworkError> {
    let own = session.randomness().next_bits(4);
    let prev = session.randomness().prev_bits(4);
    let opened = session.open_bits(&Replicated::new(own, prev))?;
    let mut h = Sha256::new();
    h.update(SEED_DOMAIN);
    for w in opened {
        h.update(w.to_le_bytes());
    }
    Ok(h.finalize().into())
}

/// The impostor sample of a batch: `(request, row)` pairs, deterministic in `seed`. Request
/// `j % requests` gets the `j`-th pair, so each gets at most `ceil(k / requests)`; rows are
/// uniform over those not `row_used`, distinct. Fewer than `k` pairs when the unused rows
/// run out; none without requests or rows.
pub fn sample_impostor_pairs(
    seed: &[u8; 32],
    requests: usize,
    db_rows: usize,
    k: usize,
    row_used: &dyn Fn(usize) -> bool,
) -> Vec<(usize, usize)> {
    if requests == 0 || db_rows == 0 || k == 0 {
        return Vec::new();
    }
    let mut rng = ChaCha20Rng::from_seed(*seed);
    let mut chosen: HashSet<usize> = HashSet::new();
    let mut rows = Vec::with_capacity(k);
    // Rejection while unused rows are plenty; past a bound on tries, the rest are drawn
    // from the list of those left, so a nearly used-up database still ends.
    let mut tries = 0usize;
    while rows.len() < k && tries < 8 * k + 64 {
        tries += 1;
        let row = uniform_below(&mut rng, db_rows);
        if !row_used(row) && chosen.insert(row) {
            rows.push(row);
        }
    }
    if rows.len() < k {
        let mut left: Vec<usize> = (0..db_rows)
            .filter(|&r| !row_used(r) && !chosen.contains(&r))
            .collect();
        while rows.len() < k && !left.is_empty() {
            let at = uniform_below(&mut rng, left.len());
            rows.push(left.swap_remove(at));
        }
    }
    rows.into_iter()
        .enumerate()
        .map(|(j, row)| (j % requests, row))
        .collect()
}

/// A uniform integer in `0..n` (`n > 0`), by rejection.
fn uniform_below(rng: &mut impl RngCore, n: usize) -> usize {
    let n = n as u64;
    let zone = u64::MAX - (u64::MAX - n + 1) % n;
    loop {
        let x = rng.next_u64();
        if x <= zone {
            return (x % n) as usize;
        }
    }
}

/// The four per-eye comparisons of a pair, in the order of the cumulative bits: `(eye,
/// mirrored)`.
const KINDS: [(Eye, bool); 4] = [
    (Eye::Left, false),
    (Eye::Right, false),
    (Eye::Left, true),
    (Eye::Right, true),
];

/// Counts `pairs` into the histograms of [`CountLayout`] with `edge_coefficients.len()`
/// edges (`edge_coefficients[j] = threshold_coefficient(e_j)`, increasing edges), the
/// matching threshold at edge `threshold_edge`: this party's replicated share of each count.
/// Every party calls it with the same pairs, its own shares of the queries
/// (`queries[pair.query]`) and its own database. The circuit runs in host memory, whatever the
/// backend. See the module for the rounds and bytes.
///
/// # Errors
/// Transport failures.
///
/// # Panics
/// If there are no edges, the edges do not increase (the coefficients do not decrease
/// strictly), `threshold_edge` is not an edge, or a pair names a query or row that is not
/// there.
pub fn count_pairs<B: Backend, T: Transport>(
    session: &mut Session<'_, T>,
    engine: &B,
    queries: &[&PartyShares],
    db: &MatchDb,
    pairs: &[StatsPair],
    edge_coefficients: &[u32],
    threshold_edge: usize,
) -> Result<Replicated<u32>, NetworkError> {
    let edges = edge_coefficients.len();
    assert!(edges > 0, "at least one bucket edge");
    assert!(threshold_edge < edges, "the threshold is an edge");
    // Increasing edges have decreasing coefficients; equal ones would leave empty buckets.
    assert!(
        edge_coefficients.windows(2).all(|w| w[0] > w[1]),
        "bucket edges must increase"
    );
    let layout = CountLayout { edges };
    let cut = edges - 1;
    let n_pairs = pairs.len();
    // The comparisons' inputs: `[rotation][kind][pair]`, each rotation padded to words.
    let pw = words_for(KINDS.len() * n_pairs);
    let n = ROTATION_COUNT * pw * 64;
    let dots = pair_dots(session.party(), engine, queries, db, pairs);
    let mut cd = Zeroizing::new(vec![0u16; n]);
    let mut md = Zeroizing::new(vec![0u16; n]);
    for rotation in 0..ROTATION_COUNT {
        for (kind, (code, mask)) in dots.iter().enumerate() {
            let at = rotation * pw * 64 + kind * n_pairs;
            let from = rotation * n_pairs;
            cd[at..at + n_pairs].copy_from_slice(&code[from..from + n_pairs]);
            md[at..at + n_pairs].copy_from_slice(&mask[from..from + n_pairs]);
        }
    }
    drop(dots);
    // Words `[edge][rotation][pw]`, regrouped `[rotation][edge][pw]` for the OR tree.
    let matches = match_bits_at_each(session, &cd, &md, &edge_coefficients[1..])?;
    drop((cd, md));
    let regroup = |words: &[u64]| -> Vec<u64> {
        let mut out = vec![0u64; words.len()];
        for j in 0..cut {
            for rotation in 0..ROTATION_COUNT {
                let from = (j * ROTATION_COUNT + rotation) * pw;
                let to = (rotation * cut + j) * pw;
                out[to..to + pw].copy_from_slice(&words[from..from + pw]);
            }
        }
        out
    };
    let matches = Replicated::new(regroup(&matches.own), regroup(&matches.prev));
    let below = or_blocks(session, &matches, ROTATION_COUNT)?;
    // Cumulative bit (kind, j, pair) at this position of the OR tree's output.
    let bit = |kind: usize, j: usize, p: usize| j * pw * 64 + kind * n_pairs + p;
    let cumulative_bits = KINDS.len() * cut * n_pairs;
    let padded = cut * pw * 64;

    // Joint: left bit at e_j AND right bit at e_k, (j, k, pair) order.
    let joint_positions = |kind: usize| -> Vec<Option<usize>> {
        (0..cut)
            .flat_map(|j| (0..cut).flat_map(move |k| (0..n_pairs).map(move |p| (j, k, p))))
            .map(|(j, k, p)| Some(bit(kind, if kind == 0 { j } else { k }, p)))
            .collect()
    };
    let joint = session.and(
        &below.gather(&joint_positions(0)),
        &below.gather(&joint_positions(1)),
    )?;
    let joint_bits = cut * cut * n_pairs;
    let positions: Vec<usize> = (0..KINDS.len())
        .flat_map(|kind| (0..cut).flat_map(move |j| (0..n_pairs).map(move |p| bit(kind, j, p))))
        .chain((0..joint_bits).map(|i| padded + i))
        .collect();
    let arithmetic = b2a(session, &Replicated::concat(&[&below, &joint]), &positions)?;

    // Sums per population: [population][cumulative (kind, j) then joint (j, k)].
    let per = KINDS.len() * cut + cut * cut;
    let sums = |component: &[u32]| -> Vec<Vec<u32>> {
        let mut out = vec![vec![0u32; per]; Population::ALL.len()];
        for (p, pair) in pairs.iter().enumerate() {
            let sums = &mut out[pair.population.index()];
            for (s, sum) in sums.iter_mut().enumerate().take(KINDS.len() * cut) {
                *sum = sum.wrapping_add(component[s * n_pairs + p]);
            }
            for (s, sum) in sums.iter_mut().skip(KINDS.len() * cut).enumerate() {
                *sum = sum.wrapping_add(component[cumulative_bits + s * n_pairs + p]);
            }
        }
        out
    };
    let mut totals = [0u32; 3];
    for pair in pairs {
        totals[pair.population.index()] += 1;
    }
    // The population totals are public: they enter component 0 alone.
    let component = |values: &[u32], holds_zero: bool| -> Vec<u32> {
        let sums = sums(values);
        let mut out = vec![0u32; layout.counts()];
        for population in Population::ALL {
            let total = if holds_zero {
                totals[population.index()]
            } else {
                0
            };
            buckets(
                &layout,
                population,
                &sums[population.index()],
                (total, threshold_edge),
                &mut out,
            );
        }
        out
    };
    let party = session.party().index();
    Ok(Replicated::new(
        component(&arithmetic.own, party == 0),
        component(&arithmetic.prev, party == 1),
    ))
}

/// One component of a population's bucket counts from its sums of cumulative bits
/// (`sums[kind * (E - 1) + j]`, then the joint `(E - 1)^2`), `total` its share of the
/// population's pair count, `threshold_edge` the matching threshold's edge.
fn buckets(
    layout: &CountLayout,
    population: Population,
    sums: &[u32],
    (total, threshold_edge): (u32, usize),
    out: &mut [u32],
) {
    let e = layout.edges;
    let cut = e - 1;
    // Pairs below the lower bound of bucket `i` (`i = e`: all of them).
    let below = |kind: usize, i: usize| -> u32 {
        match i {
            0 => 0,
            i if i == e => total,
            i => sums[kind * cut + i - 1],
        }
    };
    let per_eye = [
        (Comparison::Left, 0),
        (Comparison::Right, 1),
        (Comparison::MirroredLeft, 2),
        (Comparison::MirroredRight, 3),
    ];
    for (comparison, kind) in per_eye {
        let at = layout.offset(population, comparison);
        for i in 0..e {
            out[at + i] = below(kind, i + 1).wrapping_sub(below(kind, i));
        }
    }
    // Pairs below left bound `i` and right bound `k` together.
    let joint = KINDS.len() * cut;
    let both = |i: usize, k: usize| -> u32 {
        match (i, k) {
            (0, _) | (_, 0) => 0,
            (i, k) if i == e => below(1, k),
            (i, _) if k == e => below(0, i),
            (i, k) => sums[joint + (i - 1) * cut + k - 1],
        }
    };
    let at = layout.offset(population, Comparison::Joint);
    for i in 0..e {
        for k in 0..e {
            out[at + i * e + k] = both(i + 1, k + 1)
                .wrapping_sub(both(i, k + 1))
                .wrapping_sub(both(i + 1, k))
                .wrapping_add(both(i, k));
        }
    }
    out[layout.offset(population, Comparison::Matching)] = both(threshold_edge, threshold_edge);
}

/// One kind's additive `(cd, md)` shares, `[rotation][pair]`.
type DotShares = (Zeroizing<Vec<u16>>, Zeroizing<Vec<u16>>);

/// Additive `(cd, md)` shares over Z_{2^16} of each pair's 31 rotations, per kind of
/// [`KINDS`]: `[kind] -> (cd, md)`, each `[rotation][pair]`, the mask dots doubled as the
/// pipeline doubles them. A query's rotations are written out once per kind and part and
/// multiplied with its few sampled rows by [`Backend::dot_few`]: a batch's pairs are a few
/// rows per query, too few to repay laying the rotations out for the matching kernels.
fn pair_dots<B: Backend>(
    party: sdk_orb::PartyId,
    engine: &B,
    queries: &[&PartyShares],
    db: &MatchDb,
    pairs: &[StatsPair],
) -> Vec<DotShares> {
    let n_pairs = pairs.len();
    let mut by_query: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (p, pair) in pairs.iter().enumerate() {
        by_query.entry(pair.query).or_default().push(p);
    }
    // Two rows per query: plain, then mirrored.
    let people: Vec<(&PartyShares, bool)> = by_query
        .keys()
        .flat_map(|&q| [(queries[q], false), (queries[q], true)])
        .collect();
    let scratch = ScratchPool::keeping(0);
    let matrix = QueryMatrix::new(party, &people, &scratch);
    let mut out: Vec<_> = KINDS
        .iter()
        .map(|_| {
            (
                Zeroizing::new(vec![0u16; ROTATION_COUNT * n_pairs]),
                Zeroizing::new(vec![0u16; ROTATION_COUNT * n_pairs]),
            )
        })
        .collect();
    let mut rotated = Zeroizing::new(vec![0u16; ROTATION_COUNT * Part::Code.coefs()]);
    // Sized for the largest group up front: a reallocation would leave shares behind unzeroized.
    let most = by_query.values().map(Vec::len).max().unwrap_or(0);
    let mut rows = Zeroizing::new(Vec::with_capacity(most * Part::Code.coefs()));
    let mut dots = Zeroizing::new(Vec::with_capacity(most * ROTATION_COUNT));
    for (slot, members) in by_query.values().enumerate() {
        for ((eye, mirrored), (code, mask)) in KINDS.iter().zip(out.iter_mut()) {
            let row = 2 * slot + usize::from(*mirrored);
            for (part, dst, scale) in [(Part::Code, code, 1u16), (Part::Mask, mask, 2)] {
                let len = part.coefs();
                let rotated = &mut rotated[..ROTATION_COUNT * len];
                for (out, k) in rotated.chunks_exact_mut(len).zip(rotations()) {
                    rotate_coefs(matrix.row(*eye, part, row), k, out);
                }
                rows.clear();
                for &p in members {
                    let r = pairs[p].row;
                    rows.extend_from_slice(db.vectors(*eye, part, r..r + 1));
                }
                dots.clear();
                dots.resize(ROTATION_COUNT * members.len(), 0);
                engine.dot_few(rotated, &rows, len, &mut dots);
                for rotation in 0..ROTATION_COUNT {
                    for (m, &p) in members.iter().enumerate() {
                        dst[rotation * n_pairs + p] =
                            dots[rotation * members.len() + m].wrapping_mul(scale);
                    }
                }
            }
        }
    }
    out
}

/// Replicated multiplication over Z_{2^32}: `z_i = x_i y_i + x_i y_{i-1} + x_{i-1} y_i` plus
/// an additive zero-sharing, sent to the next party. One round; draws `n` u32 from each
/// stream.
fn mul<T: Transport>(
    session: &mut Session<'_, T>,
    x: &Replicated<u32>,
    y: &Replicated<u32>,
) -> Result<Replicated<u32>, NetworkError> {
    let n = x.len();
    let zero = session.randomness().zero_u32(n);
    let own: Vec<u32> = (0..n)
        .map(|e| {
            x.own[e]
                .wrapping_mul(y.own[e])
                .wrapping_add(x.own[e].wrapping_mul(y.prev[e]))
                .wrapping_add(x.prev[e].wrapping_mul(y.own[e]))
                .wrapping_add(zero[e])
        })
        .collect();
    session.round();
    session.send(Peer::Next, &own)?;
    let prev = session.recv(Peer::Prev, n)?;
    Ok(Replicated::new(own, prev))
}

/// Arithmetic shares over Z_{2^32} of the XOR-shared bits at `positions` of `bits`: with
/// `[c_k]` the sharing whose component `k` is the bit's component `c_k`,
/// `t = c_0 + c_1 - 2 c_0 c_1` and `b = t + c_2 - 2 t c_2`. Two rounds.
fn b2a<T: Transport>(
    session: &mut Session<'_, T>,
    bits: &Replicated<u64>,
    positions: &[usize],
) -> Result<Replicated<u32>, NetworkError> {
    let me = session.party().index();
    let get = |words: &[u64], p: usize| ((words[p / 64] >> (p % 64)) & 1) as u32;
    let own: Vec<u32> = positions.iter().map(|&p| get(&bits.own, p)).collect();
    let prev: Vec<u32> = positions.iter().map(|&p| get(&bits.prev, p)).collect();
    let zeros = || vec![0u32; positions.len()];
    // This party holds components `me` (own) and `me - 1` (prev).
    let component = |k: usize| -> Replicated<u32> {
        if k == me {
            Replicated::new(own.clone(), zeros())
        } else if (k + 1) % 3 == me {
            Replicated::new(zeros(), prev.clone())
        } else {
            Replicated::new(zeros(), zeros())
        }
    };
    let xor = |x: &Replicated<u32>, y: &Replicated<u32>, xy: &Replicated<u32>| {
        let f = |x: &[u32], y: &[u32], xy: &[u32]| -> Vec<u32> {
            (0..x.len())
                .map(|e| x[e].wrapping_add(y[e]).wrapping_sub(xy[e].wrapping_mul(2)))
                .collect()
        };
        Replicated::new(f(&x.own, &y.own, &xy.own), f(&x.prev, &y.prev, &xy.prev))
    };
    let (c0, c1, c2) = (component(0), component(1), component(2));
    let t = xor(&c0, &c1, &mul(session, &c0, &c1)?);
    let tc2 = mul(session, &t, &c2)?;
    Ok(xor(&t, &c2, &tc2))
}

/// Opens `counts` with noise: each party re-randomises its component by an additive
/// zero-sharing (so the sum of the three is the count and no neighbour can remove the
/// mask), adds its `party_noise`, and sends the sum to both others. Returns each count plus
/// the three parties' noise, read from Z_{2^32} as a signed 32-bit value. One round; draws
/// `n` u32 from each stream.
///
/// # Errors
/// Transport failures.
///
/// # Panics
/// If `party_noise` and `counts` differ in length.
pub fn open_noisy<T: Transport>(
    session: &mut Session<'_, T>,
    counts: &Replicated<u32>,
    party_noise: &[i64],
) -> Result<Vec<i64>, NetworkError> {
    let n = counts.len();
    assert_eq!(party_noise.len(), n);
    let zero = session.randomness().zero_u32(n);
    let mine: Vec<u32> = (0..n)
        .map(|e| {
            // Reduction mod 2^32 of the noise: the opened sum is read back as signed.
            counts.own[e]
                .wrapping_add(zero[e])
                .wrapping_add(party_noise[e] as u32)
        })
        .collect();
    session.round();
    session.send(Peer::Next, &mine)?;
    session.send(Peer::Prev, &mine)?;
    let from_prev: Vec<u32> = session.recv(Peer::Prev, n)?;
    let from_next: Vec<u32> = session.recv(Peer::Next, n)?;
    Ok((0..n)
        .map(|e| {
            i64::from(
                mine[e]
                    .wrapping_add(from_prev[e])
                    .wrapping_add(from_next[e]) as i32,
            )
        })
        .collect())
}

/// Adds `counts` into `total` (shares of a period's accumulator).
///
/// # Panics
/// If the lengths differ.
pub fn accumulate(total: &mut Replicated<u32>, counts: &Replicated<u32>) {
    assert_eq!(total.len(), counts.len());
    for (t, c) in total.own.iter_mut().zip(&counts.own) {
        *t = t.wrapping_add(*c);
    }
    for (t, c) in total.prev.iter_mut().zip(&counts.prev) {
        *t = t.wrapping_add(*c);
    }
}

/// `n` independent draws of `Poisson(mu) - Poisson(mu)` (a symmetric Skellam of variance
/// `2 mu`), `mu >= 0`. Poisson draws by multiplication of uniforms below `mu = 10` and by
/// Hörmann's transformed rejection (PTRS) above: exact up to floating point for every `mu`.
///
/// # Panics
/// If `mu` is negative or not finite.
pub fn skellam(rng: &mut (impl RngCore + CryptoRng), mu: f64, n: usize) -> Vec<i64> {
    assert!(mu.is_finite() && mu >= 0.0, "mu must be finite and >= 0");
    (0..n)
        .map(|_| poisson(rng, mu) as i64 - poisson(rng, mu) as i64)
        .collect()
}

/// A uniform in `[0, 1)` with 53 bits.
fn unit(rng: &mut impl RngCore) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// One `Poisson(mu)` draw.
fn poisson(rng: &mut impl RngCore, mu: f64) -> u64 {
    if mu == 0.0 {
        return 0;
    }
    if mu < 10.0 {
        let limit = (-mu).exp();
        let mut k = 0;
        let mut product = unit(rng);
        while product > limit {
            k += 1;
            product *= unit(rng);
        }
        return k;
    }
    // W. Hörmann, "The transformed rejection method for generating Poisson random
    // variables", Insurance: Mathematics and Economics 12 (1993).
    let smu = mu.sqrt();
    let b = 0.931 + 2.53 * smu;
    let a = -0.059 + 0.02483 * b;
    let inv_alpha = 1.1239 + 1.1328 / (b - 3.4);
    let vr = 0.9277 - 3.6224 / (b - 2.0);
    let log_mu = mu.ln();
    loop {
        let u = unit(rng) - 0.5;
        let v = unit(rng);
        let us = 0.5 - u.abs();
        let k = ((2.0 * a / us + b) * u + mu + 0.43).floor();
        if us >= 0.07 && v <= vr {
            return k as u64;
        }
        if k < 0.0 || (us < 0.013 && v > us) {
            continue;
        }
        let accept = (v * inv_alpha / (a / (us * us) + b)).ln();
        if accept <= -mu + k * log_mu - ln_factorial(k) {
            return k as u64;
        }
    }
}

/// `ln(k!)`: exact sums below 20, Stirling's series (error below 1e-15 there) above.
fn ln_factorial(k: f64) -> f64 {
    if k < 20.0 {
        return (2..=k as u64).map(|i| (i as f64).ln()).sum();
    }
    let inv = 1.0 / k;
    let inv2 = inv * inv;
    (k + 0.5) * k.ln() - k
        + 0.5 * (2.0 * core::f64::consts::PI).ln()
        + inv * (1.0 / 12.0 - inv2 * (1.0 / 360.0 - inv2 * (1.0 / 1260.0 - inv2 / 1680.0)))
}

#[cfg(test)]
mod tests;
