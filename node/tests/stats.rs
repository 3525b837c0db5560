//! Distance statistics through three real nodes (TLS, redb, the MPC pipeline): synthetic
//! people and re-captures, one request per batch so the pairs each batch counts follow from
//! the rules alone; the opened histograms against the plaintext histograms of those pairs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/cluster.rs"]
mod cluster;

use std::time::Duration;

use cluster::{Cluster, Res};
use ocelli_mpc::synthetic;
use ocelli_node::clock::now_ms;
use ocelli_node::stats::{Comparison, OpenedHistograms, Population};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use sdk_orb::plaintext::{dot_products, threshold_coefficient};
use sdk_orb::rotation::rotations;
use sdk_orb::{IrisTemplate, RequestType};

type Person = (IrisTemplate, IrisTemplate);

/// The bucket of the minimum distance over the rotations: how many edges (past the first)
/// it is not below, each "below" decided as the matching decides `d < threshold`.
fn bucket(probe: &IrisTemplate, gallery: &IrisTemplate, edges: &[f64]) -> usize {
    edges[1..]
        .iter()
        .filter(|&&e| {
            let a = threshold_coefficient(e);
            !rotations().any(|k| dot_products(&probe.rotated(k), gallery).matches(a))
        })
        .count()
}

/// Adds the pair (query, enrolled) to `population`'s plaintext histograms.
fn count(h: &mut OpenedHistograms, population: Population, query: &Person, enrolled: &Person) {
    let edges = h.edges.clone();
    let e = edges.len();
    let l = bucket(&query.0, &enrolled.0, &edges);
    let r = bucket(&query.1, &enrolled.1, &edges);
    let ml = bucket(&query.1.mirrored(), &enrolled.0, &edges);
    let mr = bucket(&query.0.mirrored(), &enrolled.1, &edges);
    let t = edges
        .iter()
        .position(|&x| x == h.threshold)
        .expect("the threshold is an edge");
    let matching = [(Comparison::Matching, 0)];
    for (comparison, at) in [
        (Comparison::Left, l),
        (Comparison::Right, r),
        (Comparison::Joint, l * e + r),
        (Comparison::MirroredLeft, ml),
        (Comparison::MirroredRight, mr),
    ]
    .into_iter()
    .chain(matching.into_iter().filter(|_| l < t && r < t))
    {
        let hist = h
            .histograms
            .iter_mut()
            .find(|x| x.population == population && x.comparison == comparison)
            .expect("every histogram is opened");
        hist.counts[at] += 1;
    }
}

async fn ask(c: &mut Cluster, t: RequestType, serial: u64, p: &Person) -> Res {
    let meta = c.meta(t, serial, now_ms());
    let env = c.seal_person(&meta, &p.0, &p.1);
    for r in c.submit_all(&env).await {
        r?;
    }
    c.wait_drained(Duration::from_secs(60)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn opened_histograms_equal_the_plaintext_ones_within_the_noise() -> Res {
    const BATCHES: u64 = 7;
    let mut c = Cluster::start_mpc(&|cfg| {
        cfg.stats.enabled = true;
        // Larger than any batch's (request, row) pairs: the sample is all unused rows.
        cfg.stats.sample_pairs = 1_000;
        cfg.stats.period_batches = BATCHES;
        cfg.stats.period_s = 0;
        cfg.stats.min_pairs = 1;
        // Noise far below one count, so the comparison below is exact.
        cfg.stats.epsilon = 1e4;
    })
    .await?;
    let mut rng = ChaCha20Rng::seed_from_u64(41);
    let people: Vec<Person> = (0..4)
        .map(|_| (synthetic::eye(&mut rng), synthetic::eye(&mut rng)))
        .collect();
    let recapture = |rng: &mut ChaCha20Rng, p: &Person| -> Person {
        (
            synthetic::recapture(rng, &p.0).0,
            synthetic::recapture(rng, &p.1).0,
        )
    };
    // Re-authentications that tell the histograms apart: serial 1's left eye re-captured with
    // a stranger's right; serial 2's right eye re-captured, mirrored, as the left, with a
    // stranger's right (close in the mirrored right comparison only).
    let r1 = (
        synthetic::recapture(&mut rng, &people[0].0).0,
        synthetic::eye(&mut rng),
    );
    let r2 = (
        synthetic::recapture(&mut rng, &people[1].1).0.mirrored(),
        synthetic::eye(&mut rng),
    );
    let g3 = recapture(&mut rng, &people[2]);
    // Batches 1-4 enrol serials 1-4; request i is sampled against every row not yet sampled,
    // which is serial i - 1.
    for p in &people {
        ask(&mut c, RequestType::Uniqueness, 0, p).await?;
    }
    // Batch 5: re-authentication of serial 1, sampled against serial 4, the last unused row.
    ask(&mut c, RequestType::Reauth, 1, &r1).await?;
    // Batch 6: a re-capture of serial 3 matches it (genuine); no row is left to sample.
    ask(&mut c, RequestType::Uniqueness, 0, &g3).await?;
    // Batch 7: re-authentication of serial 2; the period opens.
    ask(&mut c, RequestType::Reauth, 2, &r2).await?;
    let s = c.assert_stores_agree();
    assert_eq!(s.serials, vec![1, 2, 3, 4]);

    let opened: Vec<OpenedHistograms> = (0..3)
        .map(|i| {
            c.state(i)
                .store()
                .opened_histograms(None)
                .unwrap()
                .expect("period 0 opened")
        })
        .collect();
    assert_eq!(opened[0], opened[1]);
    assert_eq!(opened[1], opened[2]);
    let h = &opened[0];
    assert_eq!((h.period, h.first_batch, h.last_batch), (0, 1, BATCHES));
    assert_eq!(
        (h.impostor_pairs, h.genuine_pairs, h.reauthentication_pairs),
        (4, 1, 2)
    );

    let mut plain = h.clone();
    for x in &mut plain.histograms {
        x.counts.iter_mut().for_each(|c| *c = 0);
    }
    for i in 1..4 {
        count(&mut plain, Population::Impostor, &people[i], &people[i - 1]);
    }
    count(&mut plain, Population::Impostor, &r1, &people[3]);
    count(&mut plain, Population::Reauthentication, &r1, &people[0]);
    count(&mut plain, Population::Genuine, &g3, &people[2]);
    count(&mut plain, Population::Reauthentication, &r2, &people[1]);
    // The pairs tell every histogram of a population from its sibling.
    let of = |c: Comparison| {
        plain
            .histogram(Population::Reauthentication, c)
            .unwrap()
            .counts
            .clone()
    };
    assert_ne!(of(Comparison::Left), of(Comparison::Right));
    assert_ne!(of(Comparison::MirroredLeft), of(Comparison::MirroredRight));
    // Only the genuine pair has both eyes close: the matching counts tell it apart.
    let matching = |p: Population| {
        plain
            .histogram(p, Comparison::Matching)
            .map(|g| g.counts.clone())
    };
    assert_eq!(matching(Population::Genuine), Some(vec![1]));
    assert_eq!(matching(Population::Reauthentication), Some(vec![0]));
    assert_eq!(matching(Population::Impostor), Some(vec![0]));
    // The test's epsilon leaves a noise variance far below one count: the comparison is exact
    // but for a draw of probability about 1e-4.
    let bound = 6.0 * h.noise_variance.sqrt();
    assert!(
        bound < 0.5,
        "the test's epsilon leaves noise of a count or more: {bound}"
    );
    assert_eq!(h.histograms.len(), plain.histograms.len());
    for (o, p) in h.histograms.iter().zip(&plain.histograms) {
        assert_eq!((o.population, o.comparison), (p.population, p.comparison));
        for (b, (x, y)) in o.counts.iter().zip(&p.counts).enumerate() {
            assert!(
                ((x - y) as f64).abs() <= bound,
                "{:?} {:?} bucket {b}: opened {x}, plaintext {y}, bound {bound}",
                o.population,
                o.comparison
            );
        }
    }
    // A fresh period began with the next batch.
    let next = c
        .state(0)
        .store()
        .stats_period()?
        .expect("a running period");
    assert_eq!(
        (next.period, next.first_batch, next.batches),
        (1, BATCHES + 1, 0)
    );

    // `ocelli-node stats --json` reads the same from a stopped node's store.
    c.stop_all().await?;
    let config = c.dir.path().join("party1.toml");
    std::fs::write(&config, toml::to_string(&c.configs[1])?)?;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ocelli-node"))
        .args(["stats", "--json", "--config"])
        .arg(&config)
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let printed: OpenedHistograms = serde_json::from_value(json["histograms"].clone())?;
    assert_eq!(&printed, h);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ocelli-node"))
        .args(["stats", "--period", "1", "--config"])
        .arg(&config)
        .output()?;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("period 1 has not opened"));
    Ok(())
}
