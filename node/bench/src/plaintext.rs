//! The plaintext baseline: fractional-Hamming matching by popcount on the packed bits, with the
//! same integer decision rule as the MPC, in a variant per popcount instruction set. Which one
//! runs is chosen at run time, by the CPU's features and then by a short trial, not by the
//! compile target, so the plaintext / secure ratio compares against the best this core does.
//! `bench` holds it against a plain C matcher (`c`, with the `c-matcher` feature).

use sdk_orb::plaintext::COMPARE_SCALE_B;
use sdk_orb::rotation::rotations;
use sdk_orb::IrisTemplate;
use zeroize::{Zeroize, ZeroizeOnDrop};

/// A popcount variant of the matcher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Popcount {
    /// AVX-512 `vpopcntq`.
    Avx512Vpopcntdq,
    /// AVX2: nibble lookups with `vpshufb`, summed with `vpsadbw`.
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

/// Matching (query rotation, enrolled eye) pairs, straight from the templates: the
/// reference the packed matchers are tested against.
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

/// 64-bit words of one iris in [`Packed`]: code, then mask.
const ROW: usize = 400;
const WORDS: usize = 200;

/// Database irises per block of the packed matchers: 64 irises are 200 KB, which stays in L2
/// while every query row of the batch passes over it.
const BLOCK: usize = 64;

/// A batch packed for the matchers, one eye after the other, each iris 400 words (code,
/// then mask): every query rotation and the database's irises. The layout the C matcher
/// reads too, so the two are timed on the same memory. Copies of biometric bits, as the
/// templates: hidden from `Debug`, zeroized on drop.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct Packed {
    queries: [Vec<u64>; 2],
    db: [Vec<u64>; 2],
}

impl std::fmt::Debug for Packed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packed")
            .field("comparisons", &self.comparisons())
            .finish_non_exhaustive()
    }
}

impl Packed {
    /// `queries`' 31 rotations of each eye and `db`'s irises.
    pub fn new(
        queries: &[(IrisTemplate, IrisTemplate)],
        db: &[(IrisTemplate, IrisTemplate)],
    ) -> Packed {
        let push = |out: &mut Vec<u64>, t: &IrisTemplate| {
            out.extend_from_slice(t.code().words());
            out.extend_from_slice(t.mask().words());
        };
        let mut packed = Packed {
            queries: [Vec::new(), Vec::new()],
            db: [Vec::new(), Vec::new()],
        };
        for (eye, (qs, ds)) in packed.queries.iter_mut().zip(&mut packed.db).enumerate() {
            for (l, r) in queries {
                let query = if eye == 0 { l } else { r };
                for k in rotations() {
                    push(qs, &query.rotated(k));
                }
            }
            for (l, r) in db {
                push(ds, if eye == 0 { l } else { r });
            }
        }
        packed
    }

    /// (query rotation, enrolled iris) pairs in the batch.
    pub fn comparisons(&self) -> usize {
        (0..2)
            .map(|eye| self.queries[eye].len() / ROW * (self.db[eye].len() / ROW))
            .sum()
    }

    /// The first `rows` query rotations of each eye against the first `entries` irises.
    fn sample(&self, rows: usize, entries: usize) -> Packed {
        let cut = |v: &[u64], n: usize| v[..v.len().min(n * ROW)].to_vec();
        Packed {
            queries: [cut(&self.queries[0], rows), cut(&self.queries[1], rows)],
            db: [cut(&self.db[0], entries), cut(&self.db[1], entries)],
        }
    }
}

/// The decision on one pair's counts, as the MPC makes it.
#[inline(always)]
fn decide(common: u64, differing: u64, a: u32) -> usize {
    let (common, differing) = (common as i64, differing as i64);
    usize::from(i64::from(COMPARE_SCALE_B) * (common - 2 * differing) > i64::from(a) * common)
}

/// Matching pairs of `queries` against `db` (packed rows), in database blocks of [`BLOCK`]
/// so each block is read from cache by every query row; `row` counts one query row against
/// one block.
#[inline(always)]
fn blocked(queries: &[u64], db: &[u64], mut row: impl FnMut(&[u64], &[u64]) -> usize) -> usize {
    let mut total = 0;
    for block in db.chunks(BLOCK * ROW) {
        for q in queries.chunks_exact(ROW) {
            total += row(q, block);
        }
    }
    total
}

/// One query row against a block with `u64::count_ones`, for whatever the caller's target
/// features make of it.
#[inline(always)]
fn row_scalar(q: &[u64], block: &[u64], a: u32) -> usize {
    let (qc, qm) = q.split_at(WORDS);
    block
        .chunks_exact(ROW)
        .map(|e| {
            let (ec, em) = e.split_at(WORDS);
            let (mut common, mut differing) = (0u64, 0u64);
            for i in 0..WORDS {
                let both = qm[i] & em[i];
                common += u64::from(both.count_ones());
                differing += u64::from(((qc[i] ^ ec[i]) & both).count_ones());
            }
            decide(common, differing, a)
        })
        .sum()
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod x86 {
    use super::{blocked, decide, row_scalar, ROW, WORDS};
    use std::arch::x86_64::*;

    #[target_feature(enable = "popcnt")]
    pub(super) fn count_popcnt(queries: &[u64], db: &[u64], a: u32) -> usize {
        blocked(queries, db, |q, block| row_scalar(q, block, a))
    }

    /// Bytes' popcounts by nibble lookups (`vpshufb`), summed in byte lanes, which hold the
    /// counts of up to 31 vectors; `vpsadbw` then sums each eight bytes into a 64-bit lane.
    #[target_feature(enable = "avx2,popcnt")]
    pub(super) fn count_avx2(queries: &[u64], db: &[u64], a: u32) -> usize {
        #[rustfmt::skip]
        let table = _mm256_setr_epi8(
            0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4,
            0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4,
        );
        let low = _mm256_set1_epi8(0x0f);
        let bytes = |v: __m256i| {
            let lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, low));
            let hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), low));
            _mm256_add_epi8(lo, hi)
        };
        let sum = |v: __m256i| {
            let s = _mm256_sad_epu8(v, _mm256_setzero_si256());
            let s = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            (_mm_cvtsi128_si64(s) + _mm_extract_epi64(s, 1)) as u64
        };
        blocked(queries, db, |q, block| {
            let (qc, qm) = (q.as_ptr(), q[WORDS..].as_ptr());
            block
                .chunks_exact(ROW)
                .map(|e| {
                    let (ec, em) = (e.as_ptr(), e[WORDS..].as_ptr());
                    let (mut common, mut differing) = (0u64, 0u64);
                    // 50 vectors: two halves of 25, each at most 200 in a byte lane.
                    for half in 0..2 {
                        let (mut c, mut d) = (_mm256_setzero_si256(), _mm256_setzero_si256());
                        for v in 0..25 {
                            let i = 4 * (25 * half + v);
                            // SAFETY: `i + 4 <= WORDS`, inside the code and mask halves of
                            // both rows, which `chunks_exact(ROW)` sized; unaligned loads.
                            let (qcv, qmv, ecv, emv) = unsafe {
                                (
                                    _mm256_loadu_si256(qc.add(i).cast()),
                                    _mm256_loadu_si256(qm.add(i).cast()),
                                    _mm256_loadu_si256(ec.add(i).cast()),
                                    _mm256_loadu_si256(em.add(i).cast()),
                                )
                            };
                            let both = _mm256_and_si256(qmv, emv);
                            let diff = _mm256_and_si256(_mm256_xor_si256(qcv, ecv), both);
                            c = _mm256_add_epi8(c, bytes(both));
                            d = _mm256_add_epi8(d, bytes(diff));
                        }
                        common += sum(c);
                        differing += sum(d);
                    }
                    decide(common, differing, a)
                })
                .sum()
        })
    }

    /// `vpopcntq` on 25 vectors of eight words, counts summed in 64-bit lanes; two irises
    /// of the block at a time, so each query vector loaded serves both.
    #[target_feature(enable = "avx512f,avx512vpopcntdq,popcnt")]
    pub(super) fn count_avx512(queries: &[u64], db: &[u64], a: u32) -> usize {
        let reduce = |c: __m512i, d: __m512i| {
            decide(
                _mm512_reduce_add_epi64(c) as u64,
                _mm512_reduce_add_epi64(d) as u64,
                a,
            )
        };
        blocked(queries, db, |q, block| {
            let (qc, qm) = (q.as_ptr(), q[WORDS..].as_ptr());
            let mut pairs = block.chunks_exact(2 * ROW);
            let mut total = 0;
            for e in &mut pairs {
                let (e0, e1) = (e.as_ptr(), e[ROW..].as_ptr());
                let z = _mm512_setzero_si512();
                let (mut c0, mut d0, mut c1, mut d1) = (z, z, z, z);
                for v in 0..25 {
                    let i = 8 * v;
                    // SAFETY: `i + 8 <= WORDS`, inside the code and mask halves of the query
                    // row and of both irises, which `chunks_exact` sized; unaligned loads.
                    let (qcv, qmv, c0v, m0v, c1v, m1v) = unsafe {
                        (
                            _mm512_loadu_si512(qc.add(i).cast()),
                            _mm512_loadu_si512(qm.add(i).cast()),
                            _mm512_loadu_si512(e0.add(i).cast()),
                            _mm512_loadu_si512(e0.add(WORDS + i).cast()),
                            _mm512_loadu_si512(e1.add(i).cast()),
                            _mm512_loadu_si512(e1.add(WORDS + i).cast()),
                        )
                    };
                    let both0 = _mm512_and_si512(qmv, m0v);
                    let diff0 = _mm512_and_si512(_mm512_xor_si512(qcv, c0v), both0);
                    let both1 = _mm512_and_si512(qmv, m1v);
                    let diff1 = _mm512_and_si512(_mm512_xor_si512(qcv, c1v), both1);
                    c0 = _mm512_add_epi64(c0, _mm512_popcnt_epi64(both0));
                    d0 = _mm512_add_epi64(d0, _mm512_popcnt_epi64(diff0));
                    c1 = _mm512_add_epi64(c1, _mm512_popcnt_epi64(both1));
                    d1 = _mm512_add_epi64(d1, _mm512_popcnt_epi64(diff1));
                }
                total += reduce(c0, d0) + reduce(c1, d1);
            }
            for e in pairs.remainder().chunks_exact(ROW) {
                let (ec, em) = (e.as_ptr(), e[WORDS..].as_ptr());
                let (mut c, mut d) = (_mm512_setzero_si512(), _mm512_setzero_si512());
                for v in 0..25 {
                    let i = 8 * v;
                    // SAFETY: as above, for one iris.
                    let (qcv, qmv, ecv, emv) = unsafe {
                        (
                            _mm512_loadu_si512(qc.add(i).cast()),
                            _mm512_loadu_si512(qm.add(i).cast()),
                            _mm512_loadu_si512(ec.add(i).cast()),
                            _mm512_loadu_si512(em.add(i).cast()),
                        )
                    };
                    let both = _mm512_and_si512(qmv, emv);
                    let diff = _mm512_and_si512(_mm512_xor_si512(qcv, ecv), both);
                    c = _mm512_add_epi64(c, _mm512_popcnt_epi64(both));
                    d = _mm512_add_epi64(d, _mm512_popcnt_epi64(diff));
                }
                total += reduce(c, d);
            }
            total
        })
    }
}

/// Matching pairs of `packed` with `kernel`'s instructions.
///
/// # Panics
/// If this CPU does not run `kernel` (it is not in [`Popcount::supported`]).
#[allow(unsafe_code)]
pub fn count_packed(kernel: Popcount, packed: &Packed, a: u32) -> usize {
    assert!(
        Popcount::supported().contains(&kernel),
        "{kernel:?} unsupported"
    );
    (0..2)
        .map(|eye| {
            let (q, d) = (&packed.queries[eye][..], &packed.db[eye][..]);
            match kernel {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: `supported` detected every feature this variant is compiled for.
                Popcount::Avx512Vpopcntdq => unsafe { x86::count_avx512(q, d, a) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: as above.
                Popcount::Avx2 => unsafe { x86::count_avx2(q, d, a) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: as above.
                Popcount::Popcnt => unsafe { x86::count_popcnt(q, d, a) },
                _ => blocked(q, d, |q, block| row_scalar(q, block, a)),
            }
        })
        .sum()
}

/// [`count`] with `kernel`'s instructions, on the batch packed.
///
/// # Panics
/// If this CPU does not run `kernel` (it is not in [`Popcount::supported`]).
pub fn count_matches(
    kernel: Popcount,
    queries: &[(IrisTemplate, IrisTemplate)],
    db: &[(IrisTemplate, IrisTemplate)],
    a: u32,
) -> usize {
    count_packed(kernel, &Packed::new(queries, db), a)
}

/// The plain C matcher (bench-support/plaintext.c), built `-O3 -march=native` for the build
/// host: what a C programmer's popcount loop does on this core.
#[cfg(feature = "c-matcher")]
#[allow(unsafe_code)]
pub mod c {
    use super::{Packed, ROW};
    use sdk_orb::plaintext::COMPARE_SCALE_B;

    extern "C" {
        fn ocelli_plain_count(
            queries: *const u64,
            nq: usize,
            db: *const u64,
            n: usize,
            b: i64,
            a: i64,
        ) -> usize;
        fn ocelli_plain_features() -> u32;
    }

    /// Whether this core has every instruction set the C compiler was allowed (a binary
    /// built on another machine may not run here).
    pub fn runs() -> bool {
        // SAFETY: takes nothing, reads nothing, returns a constant.
        let built = unsafe { ocelli_plain_features() };
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let here = [
                has!("popcnt"),
                has!("avx"),
                has!("avx2"),
                has!("bmi2"),
                has!("avx512f"),
                has!("avx512bw"),
                has!("avx512vl"),
                has!("avx512dq"),
                has!("avx512vpopcntdq"),
                has!("avx512bitalg"),
            ];
            here.iter()
                .enumerate()
                .all(|(bit, &has)| has || built & (1 << bit) == 0)
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = built;
            true
        }
    }

    /// Matching pairs of `packed`, by the C matcher; `None` where it does not [`runs`].
    pub fn count(packed: &Packed, a: u32) -> Option<usize> {
        runs().then(|| {
            (0..2)
                .map(|eye| {
                    let (q, d) = (&packed.queries[eye], &packed.db[eye]);
                    // SAFETY: the pointers and counts describe whole rows of `ROW` words
                    // inside the two vectors, which the C code only reads.
                    unsafe {
                        ocelli_plain_count(
                            q.as_ptr(),
                            q.len() / ROW,
                            d.as_ptr(),
                            d.len() / ROW,
                            i64::from(COMPARE_SCALE_B),
                            i64::from(a),
                        )
                    }
                })
                .sum()
        })
    }
}

/// The fastest supported variant on a sample of the run's own data (eight query rows of
/// each eye against up to 256 irises, best of three, CPU time): wider is not always faster
/// (AVX2's lookups against scalar `popcnt`, for one).
pub fn fastest(packed: &Packed, a: u32) -> Popcount {
    let sample = packed.sample(8, 256);
    let time = |kernel| {
        (0..3)
            .map(|_| {
                let start = ocelli_os::thread_cpu_seconds();
                std::hint::black_box(count_packed(kernel, &sample, a));
                ocelli_os::thread_cpu_seconds() - start
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
    use ocelli_mpc::synthetic;
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;
    use sdk_orb::plaintext::{threshold_coefficient, DEFAULT_THRESHOLD};
    use sdk_orb::rotation::ROTATION_COUNT;

    /// Every popcount variant this CPU runs, and the C matcher, count what the template
    /// matcher counts, over more than one database block; some pairs match (re-captures)
    /// while most do not.
    #[test]
    fn every_plaintext_matcher_agrees_with_the_template_one() {
        let mut rng = ChaCha20Rng::seed_from_u64(5);
        let db: Vec<_> = (0..BLOCK + 7)
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
        let packed = Packed::new(&queries, &db);
        assert_eq!(
            packed.comparisons(),
            queries.len() * 2 * ROTATION_COUNT * db.len()
        );
        assert!(Popcount::supported().contains(&fastest(&packed, a)));
        #[cfg(feature = "c-matcher")]
        if c::runs() {
            assert_eq!(c::count(&packed, a), Some(portable));
        }
    }

    /// Every variant's rate and the C matcher's on a bench-sized batch, for trying a change
    /// without the whole bench: `cargo test --release -p ocelli-mpc --features c-matcher --lib
    /// -- --ignored plaintext_rates --nocapture`.
    #[test]
    #[ignore = "a timing, not a check"]
    fn plaintext_rates() {
        let mut rng = ChaCha20Rng::seed_from_u64(6);
        let people: Vec<_> = (0..2048 + 4)
            .map(|_| (synthetic::eye(&mut rng), synthetic::eye(&mut rng)))
            .collect();
        let packed = Packed::new(&people[2048..], &people[..2048]);
        let a = threshold_coefficient(DEFAULT_THRESHOLD);
        let rate = |f: &dyn Fn() -> usize| {
            let seconds = (0..3)
                .map(|_| {
                    let start = ocelli_os::thread_cpu_seconds();
                    std::hint::black_box(f());
                    ocelli_os::thread_cpu_seconds() - start
                })
                .fold(f64::INFINITY, f64::min);
            packed.comparisons() as f64 / seconds / 1e6
        };
        #[cfg(feature = "c-matcher")]
        println!("c: {:.2} M/s", rate(&|| c::count(&packed, a).unwrap_or(0)));
        for kernel in Popcount::supported() {
            println!(
                "{}: {:.2} M/s",
                kernel.name(),
                rate(&|| count_packed(kernel, &packed, a))
            );
        }
        println!("chosen: {}", fastest(&packed, a).name());
    }
}
