use super::*;
use crate::backend::{Reference, RowBackend};
use crate::local::run_three;
use crate::synthetic;
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use sdk_orb::plaintext::{dot_products, threshold_coefficient, DEFAULT_THRESHOLD};
use sdk_orb::rotation::rotations;
use sdk_orb::IrisTemplate;

type Person = (IrisTemplate, IrisTemplate);

/// The plaintext rule the MPC computes: an eye matches if some rotation of the query passes
/// `2^16 cd > A md`; a person matches if both eyes do (or either, under the OR policy).
fn reference_match(query: &Person, enrolled: &Person, or_policy: bool, a: u32) -> bool {
    let eye = |q: &IrisTemplate, e: &IrisTemplate| {
        rotations().any(|k| dot_products(&q.rotated(k), e).matches(a))
    };
    let (l, r) = (eye(&query.0, &enrolled.0), eye(&query.1, &enrolled.1));
    if or_policy {
        l || r
    } else {
        l && r
    }
}

struct Case {
    person: Person,
    target: Target,
    against_earlier: bool,
    candidate: bool,
    or_policy: bool,
    rules: PairRules,
}

/// Shares `enrolled` and every case's person, runs the pipeline as the three parties with
/// `config`, and returns what each party opened.
fn run_cases(
    rng: &mut ChaCha20Rng,
    seed: u64,
    enrolled: &[Person],
    cases: &[Case],
    config: &PipelineConfig,
) -> Vec<Vec<MatchResult>> {
    let enrolled_shares: Vec<Vec<PartyShares>> = enrolled
        .iter()
        .map(|p| synthetic::share_person(rng, &p.0, &p.1))
        .collect();
    let case_shares: Vec<Vec<PartyShares>> = cases
        .iter()
        .map(|c| synthetic::share_person(rng, &c.person.0, &c.person.1))
        .collect();
    let out = run_three(seed, |s| {
        let i = s.party().index();
        let mut db = MatchDb::new();
        for (d, shares) in enrolled_shares.iter().enumerate() {
            db.push(d as u64 + 1, &shares[i]);
        }
        let requests: Vec<PipelineRequest<'_>> = cases
            .iter()
            .zip(&case_shares)
            .map(|(c, shares)| PipelineRequest {
                shares: &shares[i],
                target: c.target,
                against_earlier: c.against_earlier,
                candidate: c.candidate,
                or_policy: c.or_policy,
                rules: c.rules.clone(),
            })
            .collect();
        evaluate(
            s,
            &RowBackend(Reference),
            &db,
            &requests,
            config,
            &ScratchPool::default(),
        )
        .expect("pipeline")
    });
    out.into_iter().map(|(results, _, _)| results).collect()
}

mod rules;

#[test]
fn decisions_equal_the_plaintext_reference() {
    let mut rng = ChaCha20Rng::seed_from_u64(11);
    let a = threshold_coefficient(DEFAULT_THRESHOLD);
    let person = |rng: &mut ChaCha20Rng| (synthetic::eye(rng), synthetic::eye(rng));
    let recapture = |rng: &mut ChaCha20Rng, p: &Person| {
        (
            synthetic::recapture(rng, &p.0).0,
            synthetic::recapture(rng, &p.1).0,
        )
    };
    let enrolled: Vec<Person> = (0..7).map(|_| person(&mut rng)).collect();
    let stranger = person(&mut rng);
    let half = (
        synthetic::recapture(&mut rng, &enrolled[1].0).0,
        synthetic::eye(&mut rng),
    );
    let db_case = |p: Person, or_policy| Case {
        person: p,
        target: Target::Database,
        against_earlier: true,
        candidate: true,
        or_policy,
        rules: Default::default(),
    };
    let cases = [
        db_case(recapture(&mut rng, &enrolled[2]), false),
        db_case(stranger.clone(), false),
        db_case(recapture(&mut rng, &stranger), false),
        Case {
            person: recapture(&mut rng, &enrolled[4]),
            target: Target::Entry(4),
            against_earlier: false,
            candidate: false,
            or_policy: false,
            rules: Default::default(),
        },
        Case {
            person: person(&mut rng),
            target: Target::Entry(4),
            against_earlier: false,
            candidate: false,
            or_policy: false,
            rules: Default::default(),
        },
        Case {
            candidate: false,
            ..db_case(half.clone(), true)
        },
        Case {
            candidate: false,
            ..db_case(half, false)
        },
        Case {
            person: person(&mut rng),
            target: Target::Nothing,
            against_earlier: false,
            candidate: false,
            or_policy: false,
            rules: Default::default(),
        },
    ];

    // Expected results, pair by pair.
    let expected: Vec<MatchResult> = cases
        .iter()
        .enumerate()
        .map(|(j, c)| {
            let entries: Vec<usize> = match c.target {
                Target::Nothing => vec![],
                Target::Entry(d) => vec![d],
                Target::Database => (0..enrolled.len()).collect(),
            }
            .into_iter()
            .filter(|&d| reference_match(&c.person, &enrolled[d], c.or_policy, a))
            .collect();
            let earlier: Vec<usize> = (0..j)
                .filter(|&k| c.against_earlier && cases[k].candidate)
                .filter(|&k| reference_match(&c.person, &cases[k].person, c.or_policy, a))
                .collect();
            MatchResult {
                any: !entries.is_empty() || !earlier.is_empty(),
                entries,
                earlier,
                mirror: false,
            }
        })
        .collect();
    // The scenario exercises what it means to.
    assert_eq!(expected[0].entries, vec![2]);
    assert!(!expected[1].any);
    assert_eq!(expected[2].earlier, vec![1]);
    assert!(expected[3].any && !expected[4].any);
    assert!(expected[5].any && !expected[6].any, "OR policy matters");

    for privacy_max in [false, true] {
        let config = PipelineConfig {
            threshold_a: a,
            privacy_max,
            chunk_entries: 3,
            max_pass_comparisons: 1 << 21,
        };
        let out = run_cases(&mut rng, 12, &enrolled, &cases, &config);
        for party in &out {
            if privacy_max {
                let any: Vec<bool> = party.iter().map(|r| r.any).collect();
                let want: Vec<bool> = expected.iter().map(|r| r.any).collect();
                assert_eq!(any, want, "privacy-max");
                assert!(party
                    .iter()
                    .all(|r| r.entries.is_empty() && r.earlier.is_empty()));
            } else {
                assert_eq!(party, &expected);
            }
        }
    }
}

#[test]
fn rows_stay_in_serial_order_and_deletion_leaves_no_share_behind() {
    let mut rng = ChaCha20Rng::seed_from_u64(13);
    let people: Vec<Person> = (0..3)
        .map(|_| (synthetic::eye(&mut rng), synthetic::eye(&mut rng)))
        .collect();
    let shares: Vec<Vec<PartyShares>> = people
        .iter()
        .map(|p| synthetic::share_person(&mut rng, &p.0, &p.1))
        .collect();
    let mut db = MatchDb::new();
    for (d, s) in shares.iter().enumerate() {
        db.push(d as u64 + 1, &s[0]);
    }
    let second = db.code(Eye::Left, 1).to_vec();
    db.remove(0);
    assert_eq!(db.serial_ids(), &[2, 3]);
    assert_eq!(db.code(Eye::Left, 0), &second[..]);
    assert_eq!(db.row_of(1), None);
    assert_eq!(db.row_of(3), Some(1));
    db.replace(1, &shares[0][0]);
    assert_eq!(db.code(Eye::Right, 1), shares[0][0].right.code.coefs());
    // Re-inserting a lower serial id keeps the order.
    assert_eq!(db.insert(1, &shares[1][0]), 0);
    assert_eq!(db.serial_ids(), &[1, 2, 3]);
    assert_eq!(db.code(Eye::Right, 0), shares[1][0].right.code.coefs());
}

/// A variant of `original` at a chosen distance: rotated by `offset` columns, each bit flipped
/// with probability `flip`, freshly masked.
fn variant(rng: &mut ChaCha20Rng, original: &IrisTemplate, offset: i32, flip: f64) -> IrisTemplate {
    use rand_core::RngCore;
    let rotated = original.rotated(offset);
    let mut code = rotated.code().clone();
    let threshold = (flip * u32::MAX as f64) as u32;
    for i in 0..sdk_orb::CODE_BITS {
        if rng.next_u32() < threshold {
            code.set(i, !code.get(i));
        }
    }
    let mask = synthetic::eye(rng).mask().clone();
    IrisTemplate::new(
        code,
        mask,
        "v2.1",
        &sdk_orb::TemplatePolicy { min_usable_bits: 0 },
    )
    .expect("valid")
}

#[test]
fn decisions_equal_the_plaintext_reference_on_thousands_of_pairs() {
    use rand_core::RngCore;
    let mut rng = ChaCha20Rng::seed_from_u64(17);
    let t = DEFAULT_THRESHOLD;
    let a = threshold_coefficient(t);
    let enrolled: Vec<Person> = (0..60)
        .map(|_| (synthetic::eye(&mut rng), synthetic::eye(&mut rng)))
        .collect();
    let near = |rng: &mut ChaCha20Rng, e: &IrisTemplate| {
        // Flip rates within 0.01 of the threshold, either side.
        let delta = (rng.next_u32() % 2001) as f64 / 100_000.0 - 0.01;
        let offset = (rng.next_u32() % 21) as i32 - 10;
        variant(rng, e, offset, t + delta)
    };
    let mut cases: Vec<Case> = Vec::new();
    for k in 0..40 {
        let or_policy = rng.next_u32() % 3 == 0;
        let e = &enrolled[(rng.next_u32() % 60) as usize];
        let person = match k % 5 {
            0 => (synthetic::eye(&mut rng), synthetic::eye(&mut rng)),
            1 => (
                synthetic::recapture(&mut rng, &e.0).0,
                synthetic::recapture(&mut rng, &e.1).0,
            ),
            2 => (near(&mut rng, &e.0), near(&mut rng, &e.1)),
            3 => (near(&mut rng, &e.0), synthetic::eye(&mut rng)),
            _ if k > 5 => {
                // An intra-batch duplicate of an earlier request.
                let earlier = &cases[k - 5].person;
                (
                    synthetic::recapture(&mut rng, &earlier.0).0,
                    synthetic::recapture(&mut rng, &earlier.1).0,
                )
            }
            _ => (near(&mut rng, &e.0), near(&mut rng, &e.1)),
        };
        cases.push(Case {
            person,
            target: Target::Database,
            against_earlier: true,
            candidate: k % 2 == 0,
            or_policy,
            rules: Default::default(),
        });
    }

    // Reference decisions and the distance of every eye pair at its best rotation. Each query
    // eye's 31 rotations are computed once.
    let rotated: Vec<[Vec<IrisTemplate>; 2]> = cases
        .iter()
        .map(|c| [&c.person.0, &c.person.1].map(|q| rotations().map(|k| q.rotated(k)).collect()))
        .collect();
    let mut pairs = 0;
    let mut close = 0;
    let mut eye_match = |q: &[IrisTemplate], e: &IrisTemplate| {
        let dots: Vec<_> = q.iter().map(|r| dot_products(r, e)).collect();
        let d = dots
            .iter()
            .filter_map(|p| p.distance())
            .fold(f64::INFINITY, f64::min);
        pairs += 1;
        if (d - t).abs() < 0.01 {
            close += 1;
            // Away from the 2^-16 band where the integer rule and the real threshold differ.
            assert!((d - t).abs() > 1.0 / 65_536.0);
        }
        dots.iter().any(|p| p.matches(a))
    };
    let mut person_match = |j: usize, e: &Person, or_policy: bool| {
        let (l, r) = (
            eye_match(&rotated[j][0], &e.0),
            eye_match(&rotated[j][1], &e.1),
        );
        if or_policy {
            l || r
        } else {
            l && r
        }
    };
    let expected: Vec<MatchResult> = (0..cases.len())
        .map(|j| {
            let c = &cases[j];
            let entries: Vec<usize> = (0..enrolled.len())
                .filter(|&d| person_match(j, &enrolled[d], c.or_policy))
                .collect();
            let earlier: Vec<usize> = (0..j)
                .filter(|&k| cases[k].candidate)
                .filter(|&k| person_match(j, &cases[k].person, c.or_policy))
                .collect();
            MatchResult {
                any: !entries.is_empty() || !earlier.is_empty(),
                entries,
                earlier,
                mirror: false,
            }
        })
        .collect();
    assert!(pairs >= 4_000, "{pairs} eye pairs");
    assert!(
        close >= 20,
        "only {close} eye pairs within 0.01 of the threshold"
    );
    let matched = expected.iter().filter(|r| r.any).count();
    assert!(
        (10..=35).contains(&matched),
        "{matched} of 40 requests match"
    );
    assert!(
        expected.iter().any(|r| !r.earlier.is_empty()),
        "an intra-batch duplicate"
    );

    let config = PipelineConfig {
        threshold_a: a,
        privacy_max: false,
        chunk_entries: 4096,
        max_pass_comparisons: 40_000,
    };
    let out = run_cases(&mut rng, 18, &enrolled, &cases, &config);
    for party in &out {
        assert_eq!(party, &expected);
    }
}

/// The bytes per comparison the transport bound relies on, measured: the largest message any
/// party receives during a batch is exactly 4 bytes per comparison of its largest pass, and
/// within [`PipelineConfig::largest_message_bytes`].
#[test]
fn the_largest_message_is_four_bytes_per_comparison() {
    let mut rng = ChaCha20Rng::seed_from_u64(5);
    let db_shares: Vec<Box<PartyShares>> = (0..10)
        .map(|_| synthetic::random_shares(&mut rng))
        .collect();
    let queries: Vec<Box<PartyShares>> =
        (0..2).map(|_| synthetic::random_shares(&mut rng)).collect();
    let config = PipelineConfig {
        chunk_entries: 4096,
        max_pass_comparisons: 1 << 20,
        ..PipelineConfig::with_threshold(DEFAULT_THRESHOLD)
    };
    let out = run_three(3, |s| {
        let mut db = MatchDb::new();
        for (d, shares) in db_shares.iter().enumerate() {
            db.push(d as u64 + 1, shares);
        }
        let requests: Vec<PipelineRequest<'_>> = queries
            .iter()
            .map(|q| PipelineRequest {
                shares: q,
                target: Target::Database,
                against_earlier: true,
                candidate: true,
                or_policy: false,
                rules: Default::default(),
            })
            .collect();
        evaluate(
            s,
            &RowBackend(Reference),
            &db,
            &requests,
            &config,
            &ScratchPool::default(),
        )
        .expect("pipeline")
    });
    let largest = out
        .iter()
        .flat_map(|(_, _, view)| view.iter().map(|(_, m)| m.len()))
        .max()
        .unwrap_or(0);
    // The database pass is the largest: 2 requests x 10 entries.
    assert_eq!(
        largest,
        LARGEST_MESSAGE_BYTES_PER_COMPARISON * pass_comparisons(20)
    );
    assert!(largest <= config.largest_message_bytes(2));
}

#[test]
fn the_pass_bound_fits_its_cap_exactly() {
    let cap = 64 << 20;
    let c = max_pass_comparisons_within(cap);
    let config = PipelineConfig {
        max_pass_comparisons: c,
        ..PipelineConfig::with_threshold(DEFAULT_THRESHOLD)
    };
    assert!(config.largest_message_bytes(64) <= cap);
    let over = PipelineConfig {
        max_pass_comparisons: c + 62 * 64,
        ..config
    };
    assert!(over.largest_message_bytes(64) > cap);
}

/// A span's passes hold exactly what one engine call per pass gives them: the same pairs and
/// the same `(cd, md)` shares, for a plain and a mirrored scanning query, with a last pass
/// shorter than the others.
#[test]
fn a_span_of_passes_equals_its_passes_one_call_each() {
    let mut rng = ChaCha20Rng::seed_from_u64(21);
    let mut db = MatchDb::new();
    for serial in 1..=11 {
        db.push(serial, &synthetic::random_shares(&mut rng));
    }
    let query = synthetic::random_shares(&mut rng);
    let engine = RowBackend(Reference);
    let scratch = ScratchPool::default();
    let queries = QueryMatrix::new(
        PartyId::ALL[1],
        &[(&query, false), (&query, true)],
        &scratch,
    )
    .prepare_all(&engine);
    let mut request = PipelineRequest::against_database(&query);
    request.rules.mirror = true;
    let plan = BatchPlan::new(
        &[request],
        db.len(),
        &PipelineConfig::with_threshold(DEFAULT_THRESHOLD),
    );
    let passes = [0..4, 4..8, 8..11];
    let span = database_span(&engine, &db, &plan, &queries, &passes, &scratch);
    assert_eq!(span.len(), passes.len());
    for (together, rows) in span.iter().zip(&passes) {
        let alone = database_span(
            &engine,
            &db,
            &plan,
            &queries,
            std::slice::from_ref(rows),
            &scratch,
        );
        let [alone] = &alone[..] else {
            panic!("one pass");
        };
        assert_eq!(
            format!("{:?}", together.pairs),
            format!("{:?}", alone.pairs)
        );
        assert_eq!(together.padded, alone.padded);
        assert!(
            *together.cd == *alone.cd && *together.md == *alone.md,
            "rows {rows:?}"
        );
        assert!(
            together.md.iter().any(|&v| v != 0),
            "the pass holds products"
        );
    }
}

/// A batch's buffers come from the pool its caller passes and go back there: each party's
/// pool holds them after its batch, a second batch takes them again rather than adding more,
/// and no other pool is touched.
#[test]
fn a_batch_borrows_its_buffers_from_the_callers_pool() {
    let mut rng = ChaCha20Rng::seed_from_u64(8);
    let db_shares: Vec<Box<PartyShares>> =
        (0..3).map(|_| synthetic::random_shares(&mut rng)).collect();
    let queries: Vec<Box<PartyShares>> =
        (0..2).map(|_| synthetic::random_shares(&mut rng)).collect();
    let config = PipelineConfig::with_threshold(DEFAULT_THRESHOLD);
    let pools: [ScratchPool; 3] = Default::default();
    let untouched = ScratchPool::default();
    let batch = || {
        run_three(9, |s| {
            let i = s.party().index();
            let mut db = MatchDb::new();
            for (d, shares) in db_shares.iter().enumerate() {
                db.push(d as u64 + 1, shares);
            }
            let requests: Vec<_> = queries
                .iter()
                .map(|q| PipelineRequest::against_database(q))
                .collect();
            let engine = RowBackend(Reference);
            evaluate(s, &engine, &db, &requests, &config, &pools[i]).expect("pipeline")
        });
        pools.each_ref().map(ScratchPool::kept_bytes)
    };
    let first = batch();
    // Two queries' 31 rotations of a code alone are 1.6 MB, past what a pool keeps at least.
    assert!(first.iter().all(|&kept| kept > 1 << 20), "{first:?}");
    assert_eq!(batch(), first);
    assert_eq!(untouched.kept_bytes(), 0);
}
