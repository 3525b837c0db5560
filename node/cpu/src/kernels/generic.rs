//! Tiles of the shapes the tuner tries beside the hand-placed ones ([`super::tile_avx512_vnni`],
//! [`super::tile_avx2`]): one loop per instruction set, generic over the shape. The loops over
//! the tile's rows have constant bounds, so they unroll and the accumulators live in
//! registers (`scripts/mca` reads the loops the build made and flags any that spill).

use super::{check_tile, scalar_pairs, Acc, Avx2, Avx512Vnni, CONTIGUOUS};

/// AVX-512 VNNI tile of `P` (16, 32, 48 or 64) query rows by `D` database rows, as
/// [`super::tile_avx512_vnni`].
///
/// # Panics
/// If `qp` is not `P` rows of one even length, or `d` is too short for it.
pub fn tile_vnni<const P: usize, const D: usize>(
    _cpu: Avx512Vnni,
    qp: &[u16],
    d: &[u16],
    d_stride: usize,
    couple: usize,
    acc: &mut Acc<P, D>,
) {
    let pairs = check_tile(qp, P, d, d_stride, couple, D);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the token proves the CPU has the target features; the lengths were checked.
    let done = unsafe {
        x86::tile_vnni(qp, d, (d_stride, couple), pairs / 2, acc);
        pairs / 2 * 2
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    scalar_pairs(qp, d, (d_stride, couple), done..pairs, acc);
}

/// AVX2 tile of `P` (8, 16, 24 or 32) query rows by `D` database rows, contiguous, as
/// [`super::tile_avx2`].
///
/// # Panics
/// If `qp` is not `P` rows of one even length, or `d` is too short for it.
pub fn tile_avx2<const P: usize, const D: usize>(
    _cpu: Avx2,
    qp: &[u16],
    d: &[u16],
    d_stride: usize,
    acc: &mut Acc<P, D>,
) {
    let pairs = check_tile(qp, P, d, d_stride, CONTIGUOUS, D);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the token proves the CPU has the target feature; the lengths were checked.
    unsafe {
        x86::tile_avx2(qp, d, d_stride, pairs, acc)
    };
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("no token exists off x86_64")
}

/// Coefficients per row in a block of the layout [`tile_avx2_blocks`] reads: one ymm of i16.
pub const BLOCK: usize = 16;

/// AVX2 tile of `P` query rows by `D` database rows without broadcasts, contiguous: each lane
/// of an accumulator sums a pair of one query row against the same pair of one database row,
/// and the lanes are added up at the end. The query panel is laid out in blocks
/// (`engine::regroup`): coefficients `16 * b..16 * b + 16` of every row side by
/// side, then block `b + 1`, the last block as long as what is left. A broadcast takes a
/// vector pipe on Zen 3 (in llvm-mca's model) beside the `vpmaddwd` and `vpaddd`; here both operands are
/// plain loads kept in registers: query rows `G` at a time against all `D` database rows,
/// `G * D` accumulators for `G + D` loads.
///
/// # Panics
/// If `qp` is not `P` rows of one even length, or `d` is too short for it.
pub fn tile_avx2_blocks<const P: usize, const D: usize, const G: usize>(
    _cpu: Avx2,
    qp: &[u16],
    d: &[u16],
    d_stride: usize,
    acc: &mut Acc<P, D>,
) {
    let pairs = check_tile(qp, P, d, d_stride, CONTIGUOUS, D);
    let blocks = 2 * pairs / BLOCK;
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the token proves the CPU has the target feature; the lengths were checked.
        unsafe { x86::tile_avx2_blocks::<P, D, G>(qp, d, d_stride, blocks, acc) };
        last_block(qp, d, d_stride, blocks * BLOCK, acc);
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("no token exists off x86_64")
}

/// The last, shorter block of [`tile_avx2_blocks`] from coefficient `done` on: its rows side
/// by side, as many coefficients each as are left.
#[cfg(target_arch = "x86_64")]
fn last_block<const P: usize, const D: usize>(
    qp: &[u16],
    d: &[u16],
    d_stride: usize,
    done: usize,
    acc: &mut Acc<P, D>,
) {
    let rest = qp.len() / P - done;
    if rest == 0 {
        return;
    }
    let s = |x: u16| i32::from(x as i16);
    for (j, row) in acc.iter_mut().enumerate() {
        let dr = &d[j * d_stride + done..][..rest];
        for (a, q) in row.iter_mut().zip(qp[P * done..].chunks_exact(rest)) {
            *a = q
                .iter()
                .zip(dr)
                .fold(*a, |a, (&q, &d)| a.wrapping_add(s(q).wrapping_mul(s(d))));
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Acc;
    use core::arch::asm;
    use core::arch::x86_64::*;

    /// Vectors of a tile's query side, at most: the arrays below have room for this many and
    /// use `P / lanes`; the unused ones are never touched, and vanish once unrolled.
    const MAX_VECTORS: usize = 4;

    /// [`super::tile_vnni`] on `couples` couples of pairs. `vpdpwssd` in assembly, one
    /// instruction per block: LLVM splits the intrinsic into `vpmaddwd` plus `vpaddd`.
    ///
    /// # Safety
    /// The CPU must support `avx512f`, `avx512bw` and `avx512vnni`; `qp` must hold
    /// `2 * couples` steps of `P` interleaved pairs, and `d` `D` rows starting `d_stride`
    /// elements apart, each reaching `couples * couple` elements.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    #[allow(clippy::needless_range_loop)]
    pub unsafe fn tile_vnni<const P: usize, const D: usize>(
        qp: &[u16],
        d: &[u16],
        (d_stride, couple): (usize, usize),
        couples: usize,
        acc: &mut Acc<P, D>,
    ) {
        const { assert!(P.is_multiple_of(16) && P <= 16 * MAX_VECTORS) };
        let v = P / 16;
        let mut a = [[_mm512_setzero_si512(); MAX_VECTORS]; D];
        // SAFETY (every block below): `acc` rows are `P` i32, read and written whole; couple
        // c reads `4 * P` elements of `qp` at `4 * P * c` and two u32 at `c * couple` and
        // `c * couple + 2` of each database row (at `j * d_stride`, j < D): inside the
        // slices (the caller's contract). Unaligned loads are allowed.
        for (row, a) in acc.iter().zip(a.iter_mut()) {
            for i in 0..v {
                a[i] = unsafe { _mm512_loadu_si512(row.as_ptr().add(16 * i).cast()) };
            }
        }
        let (mut q, mut dp) = (qp.as_ptr(), d.as_ptr());
        for _ in 0..couples {
            for h in 0..2 {
                let mut x = [_mm512_setzero_si512(); MAX_VECTORS];
                for i in 0..v {
                    x[i] = unsafe { _mm512_loadu_si512(q.add(2 * P * h + 32 * i).cast()) };
                }
                for j in 0..D {
                    let at = unsafe { dp.add(j * d_stride + 2 * h) };
                    let b = _mm512_set1_epi32(unsafe { at.cast::<i32>().read_unaligned() });
                    for i in 0..v {
                        // SAFETY: register arithmetic; the caller guarantees the features.
                        unsafe {
                            asm!(
                                "vpdpwssd {a}, {x}, {b}",
                                a = inout(zmm_reg) a[j][i],
                                x = in(zmm_reg) x[i],
                                b = in(zmm_reg) b,
                                options(pure, nomem, nostack, preserves_flags),
                            )
                        };
                    }
                }
            }
            q = unsafe { q.add(4 * P) };
            dp = unsafe { dp.add(couple) };
        }
        for (row, a) in acc.iter_mut().zip(a) {
            for i in 0..v {
                unsafe { _mm512_storeu_si512(row.as_mut_ptr().add(16 * i).cast(), a[i]) };
            }
        }
    }

    /// [`super::tile_avx2`] on `pairs` pairs: `vpmaddwd` then `vpaddd` into the accumulator.
    ///
    /// # Safety
    /// The CPU must support `avx2`; `qp` must hold `pairs` steps of `P` interleaved pairs,
    /// and `d` `D` rows of at least `2 * pairs` elements starting `d_stride` elements apart.
    #[target_feature(enable = "avx2")]
    #[allow(clippy::needless_range_loop)]
    pub unsafe fn tile_avx2<const P: usize, const D: usize>(
        qp: &[u16],
        d: &[u16],
        d_stride: usize,
        pairs: usize,
        acc: &mut Acc<P, D>,
    ) {
        const { assert!(P.is_multiple_of(8) && P <= 8 * MAX_VECTORS) };
        let v = P / 8;
        let mut a = [[_mm256_setzero_si256(); MAX_VECTORS]; D];
        // SAFETY (every block below): `acc` rows are `P` i32, read and written whole; pair k
        // reads `2 * P` elements of `qp` at `2 * P * k` and one u32 at `2 * k` of each
        // database row (at `j * d_stride`, j < D): inside the slices (the caller's
        // contract). Unaligned loads are allowed.
        for (row, a) in acc.iter().zip(a.iter_mut()) {
            for i in 0..v {
                a[i] = unsafe { _mm256_loadu_si256(row.as_ptr().add(8 * i).cast()) };
            }
        }
        let (mut q, mut dp) = (qp.as_ptr(), d.as_ptr());
        for _ in 0..pairs {
            let mut x = [_mm256_setzero_si256(); MAX_VECTORS];
            for i in 0..v {
                x[i] = unsafe { _mm256_loadu_si256(q.add(16 * i).cast()) };
            }
            for j in 0..D {
                let at = unsafe { dp.add(j * d_stride) };
                let b = _mm256_set1_epi32(unsafe { at.cast::<i32>().read_unaligned() });
                for i in 0..v {
                    a[j][i] = _mm256_add_epi32(a[j][i], _mm256_madd_epi16(x[i], b));
                }
            }
            q = unsafe { q.add(2 * P) };
            dp = unsafe { dp.add(2) };
        }
        for (row, a) in acc.iter_mut().zip(a) {
            for i in 0..v {
                unsafe { _mm256_storeu_si256(row.as_mut_ptr().add(8 * i).cast(), a[i]) };
            }
        }
    }

    /// [`super::tile_avx2_blocks`] on `blocks` whole blocks.
    ///
    /// # Safety
    /// The CPU must support `avx2`; `qp` must hold `blocks` blocks of `P` rows of
    /// [`super::BLOCK`] coefficients, and `d` `D` rows of at least `16 * blocks` elements
    /// starting `d_stride` elements apart.
    #[target_feature(enable = "avx2")]
    #[allow(clippy::needless_range_loop)]
    pub unsafe fn tile_avx2_blocks<const P: usize, const D: usize, const G: usize>(
        qp: &[u16],
        d: &[u16],
        d_stride: usize,
        blocks: usize,
        acc: &mut Acc<P, D>,
    ) {
        const { assert!(P.is_multiple_of(G) && G * D + G + D < 16) };
        const B: usize = super::BLOCK;
        for g in (0..P).step_by(G) {
            let mut a = [[_mm256_setzero_si256(); G]; D];
            let (mut q, mut dp) = (unsafe { qp.as_ptr().add(g * B) }, d.as_ptr());
            for _ in 0..blocks {
                // SAFETY: block b reads `G` rows of 16 elements of `qp` at `(b * P + g) * 16`
                // and 16 elements at `j * d_stride + 16 * b` of each database row (j < D):
                // inside the slices (the caller's contract). Unaligned loads are allowed.
                let mut x = [_mm256_setzero_si256(); G];
                for i in 0..G {
                    x[i] = unsafe { _mm256_loadu_si256(q.add(B * i).cast()) };
                }
                for j in 0..D {
                    let y = unsafe { _mm256_loadu_si256(dp.add(j * d_stride).cast()) };
                    for i in 0..G {
                        a[j][i] = _mm256_add_epi32(a[j][i], _mm256_madd_epi16(x[i], y));
                    }
                }
                q = unsafe { q.add(B * P) };
                dp = unsafe { dp.add(B) };
            }
            for (row, a) in acc.iter_mut().zip(a) {
                for i in 0..G {
                    row[g + i] = row[g + i].wrapping_add(sum_lanes(a[i]));
                }
            }
        }
    }

    /// The wrapping sum of the eight i32 lanes of `v`.
    #[target_feature(enable = "avx2")]
    fn sum_lanes(v: __m256i) -> i32 {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
        _mm_cvtsi128_si32(s)
    }
}
