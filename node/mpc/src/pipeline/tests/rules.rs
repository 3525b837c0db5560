//! Mirror-attack detection and the per-pair OR rule (lookback window, named rows) against the
//! plaintext reference.

use super::*;

/// The plaintext mirrored capture of a person: each eye's image flipped, so the left eye's
/// code appears mirrored as the right eye's and the other way round.
fn mirrored(p: &Person) -> Person {
    (p.1.mirrored(), p.0.mirrored())
}

fn recapture(rng: &mut ChaCha20Rng, p: &Person) -> Person {
    (
        synthetic::recapture(rng, &p.0).0,
        synthetic::recapture(rng, &p.1).0,
    )
}

#[test]
fn mirror_detection_and_the_or_rule_equal_the_plaintext_reference() {
    let mut rng = ChaCha20Rng::seed_from_u64(31);
    let a = threshold_coefficient(DEFAULT_THRESHOLD);
    let person = |rng: &mut ChaCha20Rng| (synthetic::eye(rng), synthetic::eye(rng));
    let enrolled: Vec<Person> = (0..8).map(|_| person(&mut rng)).collect();
    let lookback = 3;
    let or_from_row = Some(enrolled.len() - lookback);
    let one_eye_of = |rng: &mut ChaCha20Rng, p: &Person| {
        (synthetic::recapture(rng, &p.0).0, synthetic::eye(rng))
    };
    let case = |p: Person, or_rows: Vec<usize>| Case {
        person: p,
        target: Target::Database,
        against_earlier: true,
        candidate: false,
        or_policy: false,
        rules: PairRules {
            mirror: true,
            or_from_row,
            or_rows,
            or_earlier: true,
        },
    };
    let cases = [
        case(mirrored(&recapture(&mut rng, &enrolled[2])), vec![]),
        case(recapture(&mut rng, &enrolled[3]), vec![]),
        case(person(&mut rng), vec![]),
        case(one_eye_of(&mut rng, &enrolled[6]), vec![]),
        case(one_eye_of(&mut rng, &enrolled[1]), vec![]),
        case(one_eye_of(&mut rng, &enrolled[1]), vec![1]),
        case(mirrored(&recapture(&mut rng, &enrolled[7])), vec![]),
    ];
    let expected: Vec<MatchResult> = cases
        .iter()
        .map(|c| {
            let or_rule = |d: usize| d >= enrolled.len() - lookback || c.rules.or_rows.contains(&d);
            let entries: Vec<usize> = (0..enrolled.len())
                .filter(|&d| reference_match(&c.person, &enrolled[d], or_rule(d), a))
                .collect();
            let mirror = (0..enrolled.len())
                .any(|d| reference_match(&mirrored(&c.person), &enrolled[d], false, a));
            MatchResult {
                any: !entries.is_empty(),
                entries,
                earlier: vec![],
                mirror,
            }
        })
        .collect();
    // The scenario exercises what it means to.
    assert!(
        expected[0].mirror && !expected[0].any,
        "a mirrored capture is flagged"
    );
    assert!(
        !expected[1].mirror && expected[1].entries == vec![3],
        "a re-capture matches"
    );
    assert!(
        !expected[2].mirror && !expected[2].any,
        "a stranger matches nothing"
    );
    assert_eq!(
        expected[3].entries,
        vec![6],
        "one eye within the lookback window"
    );
    assert!(!expected[4].any, "one eye beyond the window");
    assert_eq!(expected[5].entries, vec![1], "one eye of a named serial id");
    assert!(expected[6].mirror, "mirrored capture of the newest entry");
    assert!(expected.iter().all(|r| r.earlier.is_empty()));

    for privacy_max in [false, true] {
        let config = PipelineConfig {
            threshold_a: a,
            privacy_max,
            chunk_entries: 3,
            max_pass_comparisons: 1 << 21,
        };
        let out = run_cases(&mut rng, 32, &enrolled, &cases, &config);
        for party in &out {
            if privacy_max {
                for (got, want) in party.iter().zip(&expected) {
                    assert_eq!((got.any, got.mirror), (want.any, want.mirror));
                    assert!(got.entries.is_empty() && got.earlier.is_empty());
                }
            } else {
                assert_eq!(party, &expected);
            }
        }
    }
}

#[test]
fn without_mirror_detection_nothing_more_is_opened_or_sent() {
    let mut rng = ChaCha20Rng::seed_from_u64(33);
    let enrolled: Vec<Person> = (0..4)
        .map(|_| (synthetic::eye(&mut rng), synthetic::eye(&mut rng)))
        .collect();
    let shares: Vec<Vec<PartyShares>> = enrolled
        .iter()
        .map(|p| synthetic::share_person(&mut rng, &p.0, &p.1))
        .collect();
    let query = mirrored(&recapture(&mut rng, &enrolled[0]));
    let query = synthetic::share_person(&mut rng, &query.0, &query.1);
    let config = PipelineConfig::with_threshold(DEFAULT_THRESHOLD);
    let run = |mirror: bool| {
        run_three(34, |s| {
            let i = s.party().index();
            let mut db = MatchDb::new();
            for (d, p) in shares.iter().enumerate() {
                db.push(d as u64 + 1, &p[i]);
            }
            let requests = [PipelineRequest {
                shares: &query[i],
                target: Target::Database,
                against_earlier: false,
                candidate: false,
                or_policy: false,
                rules: PairRules {
                    mirror,
                    ..PairRules::default()
                },
            }];
            evaluate(
                s,
                &crate::backend::RowBackend(crate::backend::Reference),
                &db,
                &requests,
                &config,
                &crate::scratch::ScratchPool::default(),
            )
            .expect("pipeline")
        })
    };
    let (off, on) = (run(false), run(true));
    assert!(!off[0].0[0].mirror && on[0].0[0].mirror);
    assert!(!off[0].0[0].any && !on[0].0[0].any);
    assert!(off[0].1.rounds < on[0].1.rounds);
    assert!(off[0].1.bytes_sent < on[0].1.bytes_sent);
}
