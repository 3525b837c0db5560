//! The plaintext baseline: fractional-Hamming matching by popcount on the packed bits, with the
//! same integer decision rule as the MPC, in a variant per popcount instruction set. Which one
//! runs is chosen at run time, by the CPU's features and then by a short trial, not by the
//! compile target, so the plaintext / secure ratio compares against the best this core does.

use sdk_orb::plaintext::COMPARE_SCALE_B;
use sdk_orb::rotation::rotations;
use sdk_orb::IrisTemplate;

/// A popcount variant of the matcher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Popcount {
    /// AVX-512 `vpopcntq`.
    Avx512Vpopcntdq,
    /// AVX2 (nibble lookups with `vpshufb`) beside scalar `popcnt`.
    Avx2,
    /// Scalar `popcnt`.
    Popcnt,
    /// Whatever the compile target has.
    Portable,
}

impl Popcount {
    /// The name `bench` reports.
    pub fn name(self) -> &'static str {
        match self {
            Popcount::Avx512Vpopcntdq => "avx512-vpopcntdq",
            Popcount::Avx2 => "avx2",
            Popcount::Popcnt => "popcnt",
            Popcount::Portable => "portable",
        }
    }

    /// Every variant this CPU runs, the widest first.
    pub fn supported() -> Vec<Popcount> {
        let mut out = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("popcnt") {
                if has!("avx512f") && has!("avx512bw") && has!("avx512vpopcntdq") {
                    out.push(Popcount::Avx512Vpopcntdq);
                }
                if has!("avx2") {
                    out.push(Popcount::Avx2);
                }
                out.push(Popcount::Popcnt);
            }
        }
        out.push(Popcount::Portable);
        out
    }
}

#[inline(always)]
fn matches(qc: &[u64; 200], qm: &[u64; 200], ec: &[u64; 200], em: &[u64; 200], a: u32) -> bool {
    let mut common = 0u32;
    let mut differing = 0u32;
    for i in 0..200 {
        let both = qm[i] & em[i];
        common += both.count_ones();
        differing += ((qc[i] ^ ec[i]) & both).count_ones();
    }
    let cd = i64::from(common) - 2 * i64::from(differing);
    i64::from(COMPARE_SCALE_B) * cd > i64::from(a) * i64::from(common)
}

/// Matching (query rotation, enrolled eye) pairs, compiled for the target's features.
#[inline(always)]
pub fn count(
    queries: &[(IrisTemplate, IrisTemplate)],
    db: &[(IrisTemplate, IrisTemplate)],
    a: u32,
) -> usize {
    let mut total = 0;
    for (ql, qr) in queries {
        for (query, eye) in [(ql, 0), (qr, 1)] {
            for k in rotations() {
                let rotated = query.rotated(k);
                let (qc, qm) = (rotated.code().words(), rotated.mask().words());
                for person in db {
                    let e = if eye == 0 { &person.0 } else { &person.1 };
                    total += usize::from(matches(qc, qm, e.code().words(), e.mask().words(), a));
                }
            }
        }
    }
    total
}

/// [`count`] compiled for the named target features, so its popcounts use them.
macro_rules! count_with {
    ($name:ident, $features:literal) => {
        #[cfg(target_arch = "x86_64")]
        #[allow(unsafe_code)]
        #[target_feature(enable = $features)]
        fn $name(
            queries: &[(IrisTemplate, IrisTemplate)],
            db: &[(IrisTemplate, IrisTemplate)],
            a: u32,
        ) -> usize {
            count(queries, db, a)
        }
    };
}
count_with!(count_avx512, "avx512f,avx512bw,avx512vpopcntdq,popcnt");
count_with!(count_avx2, "avx2,popcnt");
count_with!(count_popcnt, "popcnt");

/// [`count`] with `kernel`'s instructions.
///
/// # Panics
/// If this CPU does not run `kernel` (it is not in [`Popcount::supported`]).
#[allow(unsafe_code)]
pub fn count_matches(
    kernel: Popcount,
    queries: &[(IrisTemplate, IrisTemplate)],
    db: &[(IrisTemplate, IrisTemplate)],
    a: u32,
) -> usize {
    assert!(
        Popcount::supported().contains(&kernel),
        "{kernel:?} unsupported"
    );
    match kernel {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `supported` detected every feature this variant is compiled for.
        Popcount::Avx512Vpopcntdq => unsafe { count_avx512(queries, db, a) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Popcount::Avx2 => unsafe { count_avx2(queries, db, a) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as above.
        Popcount::Popcnt => unsafe { count_popcnt(queries, db, a) },
        _ => count(queries, db, a),
    }
}

/// The fastest supported variant on a sample of the run's own data (one query against up to
/// 256 entries, best of three, CPU time): wider is not always faster (AVX2's lookups against
/// scalar `popcnt`, for one).
pub fn fastest(
    queries: &[(IrisTemplate, IrisTemplate)],
    db: &[(IrisTemplate, IrisTemplate)],
    a: u32,
) -> Popcount {
    let (queries, db) = (&queries[..queries.len().min(1)], &db[..db.len().min(256)]);
    let time = |kernel| {
        (0..3)
            .map(|_| {
                let start = crate::process::thread_cpu_seconds();
                std::hint::black_box(count_matches(kernel, queries, db, a));
                crate::process::thread_cpu_seconds() - start
            })
            .fold(f64::INFINITY, f64::min)
    };
    Popcount::supported()
        .into_iter()
        .map(|kernel| (kernel, time(kernel)))
        .fold((Popcount::Portable, f64::INFINITY), |best, (k, t)| {
            if t < best.1 {
                (k, t)
            } else {
                best
            }
        })
        .0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic;
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;
    use sdk_orb::plaintext::{threshold_coefficient, DEFAULT_THRESHOLD};
    use sdk_orb::rotation::ROTATION_COUNT;

    /// Every popcount variant this CPU runs counts what the portable one counts, and some
    /// pairs match (re-captures) while most do not.
    #[test]
    fn every_plaintext_variant_agrees_with_the_portable_one() {
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        let db: Vec<_> = (0..12)
            .map(|_| (synthetic::eye(&mut rng), synthetic::eye(&mut rng)))
            .collect();
        let queries: Vec<_> = db[..3]
            .iter()
            .map(|(l, r)| {
                (
                    synthetic::recapture(&mut rng, l).0,
                    synthetic::recapture(&mut rng, r).0,
                )
            })
            .collect();
        let a = threshold_coefficient(DEFAULT_THRESHOLD);
        let portable = count(&queries, &db, a);
        assert!(portable > 0 && portable < queries.len() * 2 * ROTATION_COUNT * db.len() / 2);
        for kernel in Popcount::supported() {
            assert_eq!(
                count_matches(kernel, &queries, &db, a),
                portable,
                "{kernel:?}"
            );
        }
        assert!(Popcount::supported().contains(&fastest(&queries, &db, a)));
    }
}
