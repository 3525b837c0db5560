//! The parity suite every [`DotEngine`] must pass: bit-for-bit equality with the reference
//! `sdk_orb::preprocess::dot` over database and query counts that are not multiples of any
//! tile or block size, including none and one.

use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use sdk_orb::preprocess::dot;
use sdk_orb::{CODE_COEFS, MASK_COEFS};

use super::DotEngine;

fn random_u16(rng: &mut ChaCha20Rng, n: usize) -> Vec<u16> {
    (0..n).map(|_| rng.next_u32() as u16).collect()
}

/// Runs the suite against `engine`; panics on the first mismatch.
pub fn check_engine(engine: &dyn DotEngine) {
    let mut rng = ChaCha20Rng::seed_from_u64(0x5eed);
    for &(nq, nd, len) in &[
        (0usize, 5usize, MASK_COEFS),
        (3, 0, MASK_COEFS),
        (1, 1, CODE_COEFS),
        (31, 1, MASK_COEFS),
        (5, 17, MASK_COEFS),
        (33, 37, CODE_COEFS),
        (2, 70, 128),
    ] {
        let queries = random_u16(&mut rng, nq * len);
        let db = random_u16(&mut rng, nd * len);
        // Garbage first, so unwritten outputs show.
        let mut out = vec![0xA5A5u16; nq * nd];
        engine.dot(&queries, &db, len, &mut out);
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
}

#[test]
fn every_cpu_kernel_matches_the_reference() {
    for kernel in super::Kernel::all_supported() {
        let engine = super::CpuEngine::with(kernel, 2).expect("supported");
        check_engine(&engine);
    }
}
