//! Distance statistics for one batch: `count_pairs` over 256 impostor pairs with the default
//! 22 edges (0 to 0.5 in steps of 0.025, and the threshold 0.345), three parties on threads
//! over the in-memory network, dot products on `RowBackend(Reference)`. Prints the bytes and
//! rounds each party sends; the time is the wall time of the three parties together. Then
//! the comparisons of the same batch alone, on zero inputs, and as many comparisons as the
//! pipeline runs them (one coefficient per run): the yardstick for the statistics' cost.
//!
//! `cargo bench -p ocelli-mpc --bench stats`.

use criterion::{criterion_group, criterion_main, Criterion};
use ocelli_mpc::backend::{Reference, RowBackend};
use ocelli_mpc::compare::{match_bits, match_bits_at_each};
use ocelli_mpc::local::run_three_unrecorded;
use ocelli_mpc::stats::{count_pairs, sample_impostor_pairs, Population, StatsPair};
use ocelli_mpc::{synthetic, MatchDb};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use sdk_orb::plaintext::{threshold_coefficient, DEFAULT_THRESHOLD};
use sdk_orb::shamir::PartyShares;

const REQUESTS: usize = 8;
const ROWS: u64 = 1024;
const PAIRS: usize = 256;

fn bench(c: &mut Criterion) {
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let mut dbs = [MatchDb::new(), MatchDb::new(), MatchDb::new()];
    for serial in 1..=ROWS {
        for db in &mut dbs {
            db.push(serial, &synthetic::random_shares(&mut rng));
        }
    }
    let queries: Vec<Box<PartyShares>> = (0..REQUESTS)
        .map(|_| synthetic::random_shares(&mut rng))
        .collect();
    let pairs: Vec<StatsPair> =
        sample_impostor_pairs(&[3; 32], REQUESTS, ROWS as usize, PAIRS, &|_| false)
            .into_iter()
            .map(|(query, row)| StatsPair {
                query,
                row,
                population: Population::Impostor,
            })
            .collect();
    let mut edges: Vec<f64> = (0..=20).map(|i| f64::from(i) * 0.025).collect();
    edges.push(DEFAULT_THRESHOLD);
    edges.sort_by(f64::total_cmp);
    let coefs: Vec<u32> = edges.iter().map(|&e| threshold_coefficient(e)).collect();
    let threshold = edges
        .iter()
        .position(|&e| e == DEFAULT_THRESHOLD)
        .expect("the threshold is an edge");
    let refs: Vec<&PartyShares> = queries.iter().map(|q| &**q).collect();

    let run = || {
        run_three_unrecorded(2, |s| {
            let i = s.party().index();
            count_pairs(
                s,
                &RowBackend(Reference),
                &refs,
                &dbs[i],
                &pairs,
                &coefs,
                threshold,
            )
            .expect("count")
        })
    };
    for (party, (_, traffic)) in run().iter().enumerate() {
        println!(
            "party {party}: {} bytes sent in {} messages, {} rounds, for {} pairs and {} edges",
            traffic.bytes_sent,
            traffic.messages_sent,
            traffic.rounds,
            pairs.len(),
            edges.len()
        );
    }
    let mut group = c.benchmark_group("stats");
    group.sample_size(10);
    group.bench_function("count_pairs/256/reference", |b| b.iter(run));
    // The comparisons alone: 4 per pair for each of 31 rotations, at every edge but the
    // first; then as many comparisons as the pipeline runs them, one coefficient each run.
    let inputs = PAIRS * 4 * 31;
    let zeros = vec![0u16; inputs];
    let n = inputs * (edges.len() - 1);
    group.bench_function(format!("match_bits_at_each/{n}"), |b| {
        b.iter(|| {
            run_three_unrecorded(3, |s| {
                match_bits_at_each(s, &zeros, &zeros, &coefs[1..]).expect("compare")
            })
        })
    });
    let all = vec![0u16; n];
    group.bench_function(format!("match_bits/{n}"), |b| {
        b.iter(|| {
            run_three_unrecorded(3, |s| match_bits(s, &all, &all, coefs[1]).expect("compare"))
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
