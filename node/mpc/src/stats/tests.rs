use super::*;
use crate::backend::{Reference, RowBackend};
use crate::local::{assert_views_uniform, chi_squared, open_u32, run_three, Recording, View};
use crate::session::Traffic;
use crate::synthetic;
use rand_chacha::ChaCha20Rng;
use sdk_orb::plaintext::{dot_products, min_distance_over_rotations, threshold_coefficient};
use sdk_orb::rotation::rotations;
use sdk_orb::template::IrisTemplate;

/// A person's two eyes.
type Person = (IrisTemplate, IrisTemplate);

/// Enrolled people, queries and the three parties' shares of both.
struct World {
    enrolled: Vec<Person>,
    queries: Vec<Person>,
    dbs: [MatchDb; 3],
    query_shares: Vec<Vec<PartyShares>>,
}

impl World {
    fn new(rng: &mut ChaCha20Rng, enrolled: Vec<Person>, queries: Vec<Person>) -> World {
        let mut dbs = [MatchDb::new(), MatchDb::new(), MatchDb::new()];
        for (serial, (l, r)) in enrolled.iter().enumerate() {
            let shares = synthetic::share_person(rng, l, r);
            for (db, s) in dbs.iter_mut().zip(&shares) {
                db.push(serial as u64 + 1, s);
            }
        }
        let query_shares = queries
            .iter()
            .map(|(l, r)| synthetic::share_person(rng, l, r))
            .collect();
        World {
            enrolled,
            queries,
            dbs,
            query_shares,
        }
    }

    /// Runs [`count_pairs`] at the three parties, then `then` on each party's counts.
    fn run<R: Send>(
        &self,
        seed: u64,
        pairs: &[StatsPair],
        coefs: &[u32],
        then: impl Fn(&mut Session<'_, Recording>, Replicated<u32>) -> R + Sync,
    ) -> [(R, Traffic, View); 3] {
        run_three(seed, |s| {
            let i = s.party().index();
            let queries: Vec<&PartyShares> = self.query_shares.iter().map(|q| &q[i]).collect();
            let counts = count_pairs(
                s,
                &RowBackend(Reference),
                &queries,
                &self.dbs[i],
                pairs,
                coefs,
                threshold_edge(coefs),
            )
            .expect("count");
            then(s, counts)
        })
    }

    /// The counts, opened without noise.
    fn count(&self, seed: u64, pairs: &[StatsPair], coefs: &[u32]) -> Vec<u32> {
        let out = self.run(seed, pairs, coefs, |_, counts| counts);
        for party in &out {
            assert_eq!(party.1.rounds, 18, "rounds");
        }
        open_u32([&out[0].0, &out[1].0, &out[2].0])
    }

    /// The plaintext histograms of `pairs` by the decision's integer rule at each edge.
    fn plaintext(&self, pairs: &[StatsPair], coefs: &[u32]) -> Vec<u32> {
        let e = coefs.len();
        let layout = CountLayout { edges: e };
        let mut out = vec![0u32; layout.counts()];
        for pair in pairs {
            let (ql, qr) = &self.queries[pair.query];
            let (dl, dr) = &self.enrolled[pair.row];
            let bucket =
                |probe: &IrisTemplate, gallery: &IrisTemplate| plain_bucket(probe, gallery, coefs);
            // The mirrored query swaps the eyes, as a mirrored capture would.
            let (ml, mr) = (qr.mirrored(), ql.mirrored());
            let (l, r) = (bucket(ql, dl), bucket(qr, dr));
            let t = threshold_edge(coefs);
            if l < t && r < t {
                out[layout.offset(pair.population, Comparison::Matching)] += 1;
            }
            for (comparison, b) in [
                (Comparison::Left, l),
                (Comparison::Right, r),
                (Comparison::MirroredLeft, bucket(&ml, dl)),
                (Comparison::MirroredRight, bucket(&mr, dr)),
                (Comparison::Joint, l * e + r),
            ] {
                out[layout.offset(pair.population, comparison) + b] += 1;
            }
        }
        out
    }
}

/// The bucket of a pair: how many edges above the first its distance is not below, the
/// strict match bit at each edge's coefficient ORed over rotations.
fn plain_bucket(probe: &IrisTemplate, gallery: &IrisTemplate, coefs: &[u32]) -> usize {
    coefs[1..]
        .iter()
        .filter(|&&a| !rotations().any(|k| dot_products(&probe.rotated(k), gallery).matches(a)))
        .count()
}

fn person(rng: &mut ChaCha20Rng) -> Person {
    (synthetic::eye(rng), synthetic::eye(rng))
}

fn recapture(rng: &mut ChaCha20Rng, p: &Person) -> Person {
    (
        synthetic::recapture(rng, &p.0).0,
        synthetic::recapture(rng, &p.1).0,
    )
}

/// Edges spread over the re-capture distances (0.2 to 0.3) and the strangers' (about 0.47).
fn edges() -> Vec<f64> {
    vec![
        0.0, 0.2, 0.22, 0.24, 0.26, 0.28, 0.3, 0.345, 0.45, 0.46, 0.47, 0.5,
    ]
}

/// The edge of the decision's threshold, 0 where it is not an edge.
fn threshold_edge(coefs: &[u32]) -> usize {
    let t = threshold_coefficient(sdk_orb::plaintext::DEFAULT_THRESHOLD);
    coefs.iter().position(|&a| a == t).unwrap_or(0)
}

fn coefficients(edges: &[f64]) -> Vec<u32> {
    edges.iter().map(|&e| threshold_coefficient(e)).collect()
}

#[test]
fn counts_equal_the_plaintext_histograms_of_the_same_pairs() {
    let mut rng = ChaCha20Rng::seed_from_u64(1);
    let enrolled: Vec<Person> = (0..6).map(|_| person(&mut rng)).collect();
    let mirrored_recapture = {
        let (l, r) = recapture(&mut rng, &enrolled[3]);
        (r.mirrored(), l.mirrored())
    };
    let queries = vec![
        recapture(&mut rng, &enrolled[0]),
        recapture(&mut rng, &enrolled[1]),
        person(&mut rng),
        mirrored_recapture,
        // One eye re-captured, the other a stranger's: the joint histogram off its diagonal.
        (
            synthetic::recapture(&mut rng, &enrolled[4].0).0,
            synthetic::eye(&mut rng),
        ),
    ];
    let world = World::new(&mut rng, enrolled, queries);
    let pair = |query, row, population| StatsPair {
        query,
        row,
        population,
    };
    use Population::*;
    let mut pairs: Vec<StatsPair> = (0..6).map(|row| pair(2, row, Impostor)).collect();
    pairs.extend([
        pair(0, 3, Impostor),
        pair(1, 4, Impostor),
        pair(0, 0, Genuine),
        pair(4, 4, Genuine),
        pair(1, 1, Reauthentication),
        pair(3, 3, Reauthentication),
        pair(4, 4, Reauthentication),
    ]);
    let edges = edges();
    let coefs = coefficients(&edges);
    let opened = world.count(2, &pairs, &coefs);
    let expected = world.plaintext(&pairs, &coefs);
    assert_eq!(opened, expected);

    // The integer rule agrees with the distances themselves away from the edges, and the
    // pairs spread over buckets of every population and comparison.
    let layout = CountLayout { edges: edges.len() };
    for p in &pairs {
        let (q, d) = (&world.queries[p.query], &world.enrolled[p.row]);
        for (probe, gallery) in [(&q.0, &d.0), (&q.1, &d.1)] {
            let (dist, _) = min_distance_over_rotations(probe, gallery).expect("common bits");
            if edges.iter().all(|e| (dist - e).abs() > 1e-4) {
                let by_distance = edges[1..].iter().filter(|&&e| dist >= e).count();
                assert_eq!(plain_bucket(probe, gallery, &coefs), by_distance, "{dist}");
            }
        }
    }
    for population in Population::ALL {
        let in_population = pairs.iter().filter(|p| p.population == population).count();
        // Strangers never match, re-captures do.
        let matching = expected[layout.offset(population, Comparison::Matching)] as usize;
        if population == Impostor {
            assert_eq!(matching, 0);
        } else {
            assert!(matching > 0 && matching <= in_population, "{population:?}");
        }
        for comparison in Comparison::ALL {
            if comparison == Comparison::Matching {
                continue;
            }
            let at = layout.offset(population, comparison);
            let h = &expected[at..at + layout.len(comparison)];
            assert_eq!(h.iter().sum::<u32>() as usize, in_population);
            let mirrored = matches!(
                comparison,
                Comparison::MirroredLeft | Comparison::MirroredRight
            );
            // Strangers all lie near 0.47; the re-captures spread.
            if population == Reauthentication || (population == Genuine && !mirrored) {
                let used = h.iter().filter(|&&c| c > 0).count();
                assert!(used >= 2, "{population:?} {comparison:?}: {h:?}");
            }
        }
    }
}

/// Every message a party receives while counting and opening must look uniform, for two
/// batches whose pairs lie at very different distances, and the sizes must be the same.
#[test]
fn a_partys_view_of_counting_and_opening_is_uniform_and_input_independent() {
    let mut rng = ChaCha20Rng::seed_from_u64(5);
    let enrolled: Vec<Person> = (0..16).map(|_| person(&mut rng)).collect();
    let close: Vec<Person> = enrolled.iter().map(|p| recapture(&mut rng, p)).collect();
    let far: Vec<Person> = (0..16).map(|_| person(&mut rng)).collect();
    let edges = [0.0, 0.25, 0.345, 0.48, 0.5];
    let coefs = coefficients(&edges);
    let pairs: Vec<StatsPair> = (0..64)
        .map(|p| StatsPair {
            query: p % 16,
            row: (p * 5) % 16,
            population: Population::ALL[p % 3],
        })
        .collect();
    let mut sizes = Vec::new();
    for queries in [close, far] {
        let world = World::new(&mut rng, enrolled.clone(), queries);
        let out = world.run(6, &pairs, &coefs, |s, counts| {
            open_noisy(s, &counts, &vec![0; counts.len()]).expect("open")
        });
        assert_eq!(out[0].0, out[1].0);
        sizes.push(assert_views_uniform([&out[0].2, &out[1].2, &out[2].2]));
    }
    assert_eq!(sizes[0], sizes[1], "message sizes depend on the inputs");
}

/// Shares of `values` with component 0 the whole value (`(own, prev)` per party).
fn component_zero(values: &[u32]) -> [Replicated<u32>; 3] {
    let zeros = vec![0u32; values.len()];
    [
        Replicated::new(values.to_vec(), zeros.clone()),
        Replicated::new(zeros.clone(), values.to_vec()),
        Replicated::new(zeros.clone(), zeros),
    ]
}

#[test]
fn open_noisy_adds_the_three_noises_and_hides_each_from_the_neighbours() {
    let n = 4096;
    let counts: Vec<u32> = (0..n as u32).map(|c| c % 50).collect();
    let shares = component_zero(&counts);
    let noise = |party: usize| -> Vec<i64> {
        (0..n as i64)
            .map(|e| (e % 7 - 3) * (party as i64 + 1))
            .collect()
    };
    let out = run_three(7, |s| {
        let i = s.party().index();
        open_noisy(s, &shares[i], &noise(i)).expect("open")
    });
    for (e, &count) in counts.iter().enumerate() {
        let total = i64::from(count) + (0..3).map(|p| noise(p)[e]).sum::<i64>();
        for party in &out {
            assert_eq!(party.0[e], total, "count {e}");
        }
    }
    // Party 1 holds party 0's component (the counts): what party 0 sent it, less that
    // component, must not reveal party 0's noise.
    let (_, _, received) = &out[1];
    let (_, from_0) = received
        .iter()
        .find(|(from, _)| *from == Peer::Prev)
        .expect("a message from party 0");
    let words: Vec<u32> = crate::share::decode(from_0).expect("words");
    let unmasked: Vec<u32> = words
        .iter()
        .zip(&counts)
        .map(|(w, c)| w.wrapping_sub(*c))
        .collect();
    let chi = chi_squared(&crate::share::encode(&unmasked));
    assert!(chi < 400.0, "chi-squared {chi}");
}

#[test]
fn joint_seed_is_the_same_at_every_party_and_new_per_session() {
    let seeds: Vec<[u8; 32]> = [8, 9]
        .into_iter()
        .map(|session| {
            let out = run_three(session, |s| joint_seed(s).expect("seed"));
            assert!(out[0].0 == out[1].0 && out[1].0 == out[2].0);
            assert_eq!(out[0].1.rounds, 1);
            out[0].0
        })
        .collect();
    assert_ne!(seeds[0], seeds[1]);
}

#[test]
fn the_impostor_sample_is_deterministic_capped_distinct_and_skips_used_rows() {
    let seed = [7u8; 32];
    let used = |r: usize| r.is_multiple_of(3);
    let a = sample_impostor_pairs(&seed, 10, 1000, 256, &used);
    assert_eq!(a, sample_impostor_pairs(&seed, 10, 1000, 256, &used));
    assert_ne!(a, sample_impostor_pairs(&[8; 32], 10, 1000, 256, &used));
    assert_eq!(a.len(), 256);
    let rows: HashSet<usize> = a.iter().map(|p| p.1).collect();
    assert_eq!(rows.len(), a.len(), "distinct rows");
    assert!(a.iter().all(|&(q, r)| q < 10 && r < 1000 && !used(r)));
    for q in 0..10 {
        let per = a.iter().filter(|p| p.0 == q).count();
        assert!((25..=26).contains(&per), "request {q}: {per}");
    }
    // Fewer unused rows than asked: every one of them, once.
    let b = sample_impostor_pairs(&seed, 3, 30, 256, &used);
    let mut rows: Vec<usize> = b.iter().map(|p| p.1).collect();
    rows.sort_unstable();
    assert_eq!(rows, (0..30).filter(|&r| !used(r)).collect::<Vec<_>>());
    assert!(sample_impostor_pairs(&seed, 0, 30, 256, &used).is_empty());
    // Nearly all rows used: the draw still ends, with those left.
    let c = sample_impostor_pairs(&seed, 4, 100_000, 8, &|r| r != 5 && r != 99_999);
    let mut rows: Vec<usize> = c.iter().map(|p| p.1).collect();
    rows.sort_unstable();
    assert_eq!(rows, [5, 99_999]);
}

#[test]
fn skellam_has_mean_zero_and_variance_two_mu() {
    let mut rng = ChaCha20Rng::seed_from_u64(11);
    let n = 200_000;
    for mu in [0.0, 0.7, 4.0, 10.0, 55.5, 2_000.0, 1e7] {
        let draws = skellam(&mut rng, mu, n);
        let mean = draws.iter().map(|&x| x as f64).sum::<f64>() / n as f64;
        let var = draws
            .iter()
            .map(|&x| (x as f64 - mean).powi(2))
            .sum::<f64>()
            / n as f64;
        let sd_of_mean = (2.0 * mu / n as f64).sqrt();
        assert!(mean.abs() <= 6.0 * sd_of_mean, "mu {mu}: mean {mean}");
        if mu == 0.0 {
            assert_eq!(var, 0.0);
        } else {
            // The sample variance's relative error is about sqrt(2 / n) = 0.3 %.
            assert!(
                (var / (2.0 * mu) - 1.0).abs() < 0.03,
                "mu {mu}: variance {var}"
            );
        }
    }
}

#[test]
fn the_poisson_draws_follow_the_pmf() {
    // Chi-squared of the draws against the exact pmf, on both sides of the sampler switch.
    let mut rng = ChaCha20Rng::seed_from_u64(12);
    let n = 100_000;
    for mu in [3.0, 30.0] {
        let mut counts = BTreeMap::new();
        for _ in 0..n {
            *counts.entry(poisson(&mut rng, mu)).or_insert(0u64) += 1;
        }
        let pmf = |k: u64| (-mu + k as f64 * f64::ln(mu) - ln_factorial(k as f64)).exp();
        let mut chi = 0.0;
        let mut cells = 0;
        for k in 0..(mu * 4.0) as u64 {
            let expected = pmf(k) * n as f64;
            if expected >= 20.0 {
                let seen = *counts.get(&k).unwrap_or(&0) as f64;
                chi += (seen - expected).powi(2) / expected;
                cells += 1;
            }
        }
        // Mean `cells`, standard deviation `sqrt(2 cells)`: six of them.
        let bound = cells as f64 + 6.0 * (2.0 * cells as f64).sqrt();
        assert!(chi < bound, "mu {mu}: chi-squared {chi} over {cells} cells");
    }
}

#[test]
fn ln_factorial_is_continuous_at_the_switch() {
    let exact: f64 = (2..=20u64).map(|i| (i as f64).ln()).sum();
    assert!((ln_factorial(20.0) - exact).abs() < 1e-12);
    let exact_19: f64 = (2..=19u64).map(|i| (i as f64).ln()).sum();
    assert!((ln_factorial(19.0) - exact_19).abs() < 1e-12);
}

#[test]
fn count_shares_round_trip_through_bytes() {
    let shares = Replicated::new(vec![1u32, 2, u32::MAX], vec![4, 5, 6]);
    let bytes = shares.to_bytes();
    assert_eq!(bytes.len(), 24);
    assert_eq!(Replicated::<u32>::from_bytes(&bytes), Some(shares));
    assert_eq!(Replicated::<u32>::from_bytes(&bytes[..23]), None);
    assert_eq!(Replicated::<u32>::from_bytes(&bytes[..20]), None);
}

#[test]
fn accumulated_shares_open_to_the_sum() {
    let a = component_zero(&[1, 2, 3]);
    let b = component_zero(&[10, 20, u32::MAX]);
    let mut total = a.clone();
    for (t, b) in total.iter_mut().zip(&b) {
        accumulate(t, b);
    }
    assert_eq!(open_u32([&total[0], &total[1], &total[2]]), [11, 22, 2]);
}

#[test]
fn a_batch_without_pairs_or_with_one_edge_counts_what_it_has() {
    let mut rng = ChaCha20Rng::seed_from_u64(13);
    let enrolled: Vec<Person> = (0..2).map(|_| person(&mut rng)).collect();
    let queries = vec![recapture(&mut rng, &enrolled[0])];
    let world = World::new(&mut rng, enrolled, queries);
    let coefs = coefficients(&edges());
    let none = world.count(14, &[], &coefs);
    assert_eq!(none, vec![0; CountLayout { edges: coefs.len() }.counts()]);
    // One edge: one bucket per histogram, holding every pair.
    let pairs = [
        StatsPair {
            query: 0,
            row: 0,
            population: Population::Genuine,
        },
        StatsPair {
            query: 0,
            row: 1,
            population: Population::Impostor,
        },
    ];
    let one = world.count(15, &pairs, &coefs[..1]);
    // With the threshold at the only edge nothing lies below it: no pair matches.
    assert_eq!(one, [1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0]);
}

#[test]
#[should_panic(expected = "bucket edges must increase")]
fn edges_out_of_order_are_refused() {
    let mut rng = ChaCha20Rng::seed_from_u64(16);
    let (enrolled, query) = (person(&mut rng), person(&mut rng));
    let world = World::new(&mut rng, vec![enrolled], vec![query]);
    let pair = StatsPair {
        query: 0,
        row: 0,
        population: Population::Impostor,
    };
    // Refused before any message: one party alone is enough.
    let [mut transport, ..] = crate::network::in_memory_network();
    let mut randomness = crate::CorrelatedRandomness::from_seeds(&[1; 32], &[2; 32]);
    let mut session = Session::new(sdk_orb::PartyId::ALL[0], &mut transport, &mut randomness);
    let queries: Vec<&PartyShares> = world.query_shares.iter().map(|q| &q[0]).collect();
    let coefs = coefficients(&[0.0, 0.3, 0.2]);
    let _ = count_pairs(
        &mut session,
        &RowBackend(Reference),
        &queries,
        &world.dbs[0],
        &[pair],
        &coefs,
        0,
    );
}
