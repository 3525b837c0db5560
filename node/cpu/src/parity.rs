//! The parity suite every [`Backend`] must pass: bit-for-bit equality with the reference
//! `sdk_orb::preprocess::dot` over database and query counts that are not multiples of any
//! tile or block size, including none and one.

use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use sdk_orb::preprocess::dot;
use sdk_orb::{CODE_COEFS, MASK_COEFS};

use sdk_orb::plaintext::DEFAULT_THRESHOLD;

use crate::correlate::LEAF_LAGS;
use crate::engine::{BLOCK_ROWS, CHUNK, QUERY_SLAB_ROWS, SLAB_LEAF_ROWS};
use ocelli_mpc::backend::{expand_rotations, Backend};
use ocelli_mpc::db::{Eye, MatchDb, Part};
use ocelli_mpc::scratch::ScratchPool;
use sdk_orb::rotation::ROTATION_COUNT;

fn random_u16(rng: &mut ChaCha20Rng, n: usize) -> Vec<u16> {
    (0..n).map(|_| rng.next_u32() as u16).collect()
}

/// Runs the suite against `engine`; panics on the first mismatch.
pub fn check_engine<B: Backend>(engine: &B) {
    let mut rng = ChaCha20Rng::seed_from_u64(0x5eed);
    for &(nq, nd, len) in &[
        (0usize, 5usize, MASK_COEFS),
        (3, 0, MASK_COEFS),
        (1, 1, CODE_COEFS),
        (31, 1, MASK_COEFS),
        (5, 17, MASK_COEFS),
        (33, 37, CODE_COEFS),
        (2, 70, 128),
        // Chunk boundaries of the CPU engine: one chunk exactly, one and a bit, several with
        // a short last chunk.
        (7, 13, CHUNK),
        (4, 12, CHUNK + 64),
        (13, 25, 3 * CHUNK - 64),
        (6, 16, 2 * CHUNK),
        // Slabs of the CPU engine (of query rows, or of database rows where there are
        // fewer): two whole and a short last one, either way; one and a bit with chunks.
        // Blocks: two whole and a part tile.
        (2 * QUERY_SLAB_ROWS + 7, 2 * QUERY_SLAB_ROWS + 9, 128),
        (2 * QUERY_SLAB_ROWS + 9, 2 * QUERY_SLAB_ROWS + 7, 128),
        (QUERY_SLAB_ROWS + 5, QUERY_SLAB_ROWS + 6, CHUNK + 64),
        (3, 2 * BLOCK_ROWS + 5, 128),
    ] {
        let queries = random_u16(&mut rng, nq * len);
        let db = random_u16(&mut rng, nd * len);
        // Garbage first, so unwritten outputs show.
        let mut out = vec![0xA5A5u16; nq * nd];
        engine.dot(&queries, &db, len, &mut out);
        let mut few = vec![0xA5A5u16; nq * nd];
        engine.dot_few(&queries, &db, len, &mut few);
        assert_eq!(
            few,
            out,
            "{}: dot_few ({nq} x {nd}, len {len})",
            engine.name()
        );
        for q in 0..nq {
            for d in 0..nd {
                let expected = dot(
                    &db[d * len..(d + 1) * len],
                    &queries[q * len..(q + 1) * len],
                );
                assert_eq!(
                    out[q * nd + d],
                    expected,
                    "{}: query {q} db {d} ({nq} x {nd}, len {len})",
                    engine.name()
                );
            }
        }
    }
    // Extreme values: -32768 * -32768 pairs overflow i16 products.
    let len = 64;
    let queries = vec![0x8000u16; len];
    let db = vec![0x8000u16; 2 * len];
    let mut out = vec![0u16; 2];
    engine.dot(&queries, &db, len, &mut out);
    assert_eq!(out, vec![dot(&db[..len], &queries); 2]);
    check_rotations(engine, &mut rng);
}

/// Queries' rotations ([`Backend::prepare_rotations`]) against database rows, equal to the
/// rotations written out through [`Backend::dot`], and the first queries' alone
/// ([`Backend::dot_prepared_rows`]): query counts
/// on either side of where the CPU engine changes layout, row ranges that are not whole
/// blocks, one of more than a block, and more queries than the CPU engine's correlation
/// takes in one slab.
fn check_rotations<B: Backend>(engine: &B, rng: &mut ChaCha20Rng) {
    let mut db = MatchDb::new();
    for serial in 1..=BLOCK_ROWS as u64 + 7 {
        db.push(serial, &ocelli_mpc::synthetic::random_shares(rng));
    }
    let both = [Part::Code, Part::Mask].as_slice();
    let mask = [Part::Mask].as_slice();
    for (bases, eye, rows, parts) in [
        (1, Eye::Left, 0..53, both),
        (3, Eye::Right, 7..50, both),
        (5, Eye::Left, 2..53, both),
        (3, Eye::Right, 0..BLOCK_ROWS + 7, mask),
        (SLAB_LEAF_ROWS / LEAF_LAGS + 1, Eye::Left, 3..40, mask),
    ] {
        for &part in parts {
            let len = part.coefs();
            let raw = random_u16(rng, bases * len);
            let scratch = ScratchPool::default();
            let expected_rows = expand_rotations(&raw, len, &scratch);
            let mut queries = scratch.zeroed(raw.len());
            queries.copy_from_slice(&raw);
            let prepared = engine.prepare_rotations(queries, len);
            let nd = rows.len();
            let mut out = vec![0xA5A5u16; bases * ROTATION_COUNT * nd];
            engine.dot_db_prepared(&prepared, &db, eye, part, rows.clone(), &mut out);
            // The rows one by one, checked against the reference above.
            let db_rows = db.vectors(eye, part, rows.clone());
            let mut expected = vec![0u16; out.len()];
            engine.dot(&expected_rows, db_rows, len, &mut expected);
            for (q, (got, want)) in out
                .chunks_exact(nd)
                .zip(expected.chunks_exact(nd))
                .enumerate()
            {
                assert_eq!(
                    got,
                    want,
                    "{}: {bases} rotation groups, row {q}, entries {rows:?}, {part:?}",
                    engine.name()
                );
            }
            // The first queries' rows alone, from the same layout.
            for used in [0, 1, bases - 1, bases] {
                let first = used * ROTATION_COUNT;
                let mut prefix = vec![0xA5A5u16; first * nd];
                engine.dot_prepared_rows(&prepared, first, db_rows, len, &mut prefix);
                assert_eq!(
                    prefix,
                    out[..first * nd],
                    "{}: the first {used} of {bases} rotation groups, {part:?}",
                    engine.name()
                );
            }
        }
    }
}

#[test]
fn every_cpu_kernel_matches_the_reference() {
    for kernel in crate::Kernel::all_supported() {
        // The engine's chunk, and a short one that leaves a part chunk at every length.
        for chunk in [crate::engine::CHUNK, 192] {
            let engine = crate::CpuEngine::with_chunk(kernel, 2, chunk).expect("supported");
            check_engine(&engine);
        }
    }
}

/// Every tile shape the tuner may pick, each with one of the chunk lengths it tries (so every
/// shape and every chunk runs), agrees with the reference bit for bit.
#[test]
fn every_tuning_candidate_matches_the_reference() {
    use crate::tune::CHUNKS;
    for kernel in crate::Kernel::all_supported() {
        for (i, tile) in crate::Tile::candidates(kernel).into_iter().enumerate() {
            let chunk = CHUNKS[i % CHUNKS.len()];
            let engine = crate::CpuEngine::with_tile(tile, 2, chunk).expect("supported");
            assert_eq!(engine.tile(), tile);
            check_engine(&engine);
        }
    }
}

/// What the three parties open for a fixed batch (re-captures of enrolled people, strangers,
/// one-eye matches under both policies, an intra-batch duplicate, a single-entry target) run
/// through the whole pipeline on `engines`, one per party. Engines must agree bit for bit.
pub fn pipeline_outcomes<B: Backend>(
    engines: [&B; 3],
) -> [Vec<ocelli_mpc::pipeline::MatchResult>; 3] {
    pipeline_outcomes_with(engines, 37, |s, engine, db, requests, config| {
        ocelli_mpc::pipeline::evaluate(s, engine, db, requests, config, &ScratchPool::default())
    })
}

/// [`pipeline_outcomes`] with the first `enrolled` of its 37 people in the database (the
/// single-entry target becomes a database target where entry 5 is missing), each party's
/// batch run by `run` (the pipeline on a given circuit).
///
/// # Panics
/// If a party's run fails.
pub fn pipeline_outcomes_with<B: Backend, F>(
    engines: [&B; 3],
    enrolled: usize,
    run: F,
) -> [Vec<ocelli_mpc::pipeline::MatchResult>; 3]
where
    F: Fn(
            &mut ocelli_mpc::Session<'_, ocelli_mpc::local::Recording>,
            &B,
            &ocelli_mpc::MatchDb,
            &[ocelli_mpc::pipeline::PipelineRequest<'_>],
            &ocelli_mpc::pipeline::PipelineConfig,
        ) -> Result<Vec<ocelli_mpc::pipeline::MatchResult>, ocelli_mpc::NetworkError>
        + Sync,
{
    use ocelli_mpc::db::MatchDb;
    use ocelli_mpc::local::run_three;
    use ocelli_mpc::pipeline::{PipelineConfig, PipelineRequest, Target};
    use ocelli_mpc::synthetic::{eye, recapture, share_person};

    let mut rng = ChaCha20Rng::seed_from_u64(0x9e);
    let people: Vec<_> = (0..37).map(|_| (eye(&mut rng), eye(&mut rng))).collect();
    let mut queries: Vec<_> = (0..12)
        .map(|k| match k % 4 {
            0 | 1 => {
                let p = &people[(k * 7) % 37];
                (recapture(&mut rng, &p.0).0, recapture(&mut rng, &p.1).0)
            }
            2 => (eye(&mut rng), eye(&mut rng)),
            _ => (recapture(&mut rng, &people[3].0).0, eye(&mut rng)),
        })
        .collect();
    let again = (
        recapture(&mut rng, &queries[2].0).0,
        recapture(&mut rng, &queries[2].1).0,
    );
    queries.push(again);
    let mut share_all = |ps: &[(sdk_orb::IrisTemplate, sdk_orb::IrisTemplate)]| {
        ps.iter()
            .map(|(l, r)| share_person(&mut rng, l, r))
            .collect::<Vec<_>>()
    };
    let (shared_people, asked) = (share_all(&people), share_all(&queries));
    let mut config = PipelineConfig::with_threshold(DEFAULT_THRESHOLD);
    // Several database passes.
    config.max_pass_comparisons = 5_000;
    run_three(5, |s| {
        let i = s.party().index();
        let mut db = MatchDb::new();
        for (d, person) in shared_people.iter().take(enrolled).enumerate() {
            db.push(d as u64 + 1, &person[i]);
        }
        let requests: Vec<PipelineRequest<'_>> = asked
            .iter()
            .enumerate()
            .map(|(j, person)| PipelineRequest {
                shares: &person[i],
                target: if j == 5 && enrolled > 5 {
                    Target::Entry(5)
                } else {
                    Target::Database
                },
                against_earlier: true,
                candidate: j % 3 != 1,
                or_policy: j % 4 == 3,
                rules: Default::default(),
            })
            .collect();
        run(s, engines[i], &db, &requests, &config).expect("pipeline")
    })
    .map(|(results, _, _)| results)
}

#[test]
fn the_pipeline_parity_batch_has_matches_of_every_kind() {
    let cpu = crate::CpuEngine::new();
    let [r0, r1, r2] = pipeline_outcomes([&cpu, &cpu, &cpu]);
    assert!(r0 == r1 && r1 == r2);
    // Re-captures of enrolled people (requests 0, 1, 4, 8, 9), the single-entry target
    // (request 5: entry 5 is person 5, request 5 re-captures person 35: no match), one-eye
    // re-captures under the OR policy (3, 7, 11), the intra-batch duplicate (12 of 2).
    for j in [0, 1, 3, 4, 7, 8, 9, 11] {
        assert!(r0[j].any, "request {j}: {:?}", r0[j]);
    }
    assert!(!r0[5].any && !r0[2].any && !r0[6].any);
    assert_eq!(r0[12].earlier, vec![2]);
}
