//! Register-tiled micro-kernels: a tile of [`TILE_Q`] query vectors against [`TILE_D`]
//! database vectors, accumulating in 32-bit lanes (exact mod 2^16: products of u16 read as
//! i16 agree with the unsigned products mod 2^16, and i32 wrap-around keeps every sum exact
//! mod 2^32).

/// Query vectors per tile. 6 x 4 accumulators plus 4 database vectors and one query vector
/// fit AVX-512's 32 registers and need 10 loads per 24 multiply-add instructions (a 4 x 4 tile
/// needs 8 per 16 and measured 25 % slower). AVX2 has 16 registers and spills some.
pub const TILE_Q: usize = 6;
/// Database vectors per tile.
pub const TILE_D: usize = 4;

/// One tile's results, `[query][db]`.
pub type Tile = [[u16; TILE_D]; TILE_Q];

/// Portable fallback.
pub fn tile_scalar(q: &[&[u16]; TILE_Q], d: &[&[u16]; TILE_D]) -> Tile {
    let mut out = [[0u16; TILE_D]; TILE_Q];
    for (i, qi) in q.iter().enumerate() {
        for (j, dj) in d.iter().enumerate() {
            out[i][j] = qi
                .iter()
                .zip(dj.iter())
                .fold(0u16, |acc, (&a, &b)| acc.wrapping_add(a.wrapping_mul(b)));
        }
    }
    out
}

#[cfg(target_arch = "x86_64")]
use x86::{peak_avx2, peak_avx512_vnni};
#[cfg(target_arch = "x86_64")]
pub use x86::{tile_avx2, tile_avx512_vnni};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Tile, TILE_D, TILE_Q};
    use core::arch::x86_64::*;

    /// AVX-512 VNNI: `vpdpwssd` multiplies 32 pairs of i16 and adds adjacent products into
    /// 16 i32 lanes.
    ///
    /// # Safety
    /// The CPU must support `avx512f`, `avx512bw` and `avx512vnni`; every slice must have
    /// the same length, a multiple of 32.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn tile_avx512_vnni(q: &[&[u16]; TILE_Q], d: &[&[u16]; TILE_D]) -> Tile {
        let len = q[0].len();
        let mut acc = [[_mm512_setzero_si512(); TILE_D]; TILE_Q];
        let mut k = 0;
        while k < len {
            // SAFETY: k + 32 <= len for every slice (same length, multiple of 32); unaligned
            // loads are allowed.
            let dv: [__m512i; TILE_D] = core::array::from_fn(|j| unsafe {
                _mm512_loadu_si512(d[j].as_ptr().add(k).cast())
            });
            for i in 0..TILE_Q {
                // SAFETY: as above.
                let qv = unsafe { _mm512_loadu_si512(q[i].as_ptr().add(k).cast()) };
                for j in 0..TILE_D {
                    acc[i][j] = _mm512_dpwssd_epi32(acc[i][j], qv, dv[j]);
                }
            }
            k += 32;
        }
        let mut out = [[0u16; TILE_D]; TILE_Q];
        for i in 0..TILE_Q {
            for j in 0..TILE_D {
                out[i][j] = _mm512_reduce_add_epi32(acc[i][j]) as u16;
            }
        }
        out
    }

    /// 16 independent `vpdpwssd` chains on registers; returns the multiply-adds done.
    ///
    /// # Safety
    /// The CPU must support `avx512f`, `avx512bw` and `avx512vnni`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn peak_avx512_vnni(iters: u64) -> u64 {
        let a = _mm512_set1_epi16(3);
        let b = _mm512_set1_epi16(5);
        let mut acc = [_mm512_setzero_si512(); 16];
        for _ in 0..iters {
            for x in acc.iter_mut() {
                *x = _mm512_dpwssd_epi32(*x, a, b);
            }
        }
        let sum = acc
            .iter()
            .fold(0i32, |s, x| s.wrapping_add(_mm512_reduce_add_epi32(*x)));
        core::hint::black_box(sum);
        iters * 16 * 32
    }

    /// 12 independent `vpmaddwd` + `vpaddd` chains on registers; returns the multiply-adds.
    ///
    /// # Safety
    /// The CPU must support `avx2`.
    #[target_feature(enable = "avx2")]
    pub unsafe fn peak_avx2(iters: u64) -> u64 {
        let a = _mm256_set1_epi16(3);
        let b = _mm256_set1_epi16(5);
        let mut acc = [_mm256_setzero_si256(); 12];
        for _ in 0..iters {
            for x in acc.iter_mut() {
                *x = _mm256_add_epi32(*x, _mm256_madd_epi16(a, b));
            }
        }
        let mut lanes = [0i32; 8];
        let total = acc
            .iter()
            .fold(_mm256_setzero_si256(), |s, x| _mm256_add_epi32(s, *x));
        // SAFETY: lanes is 32 bytes.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), total) };
        core::hint::black_box(lanes);
        iters * 12 * 16
    }

    /// AVX2: `vpmaddwd` multiplies 16 pairs of i16 and adds adjacent products into 8 i32
    /// lanes.
    ///
    /// # Safety
    /// The CPU must support `avx2`; every slice must have the same length, a multiple of 16.
    #[target_feature(enable = "avx2")]
    pub unsafe fn tile_avx2(q: &[&[u16]; TILE_Q], d: &[&[u16]; TILE_D]) -> Tile {
        let len = q[0].len();
        let mut acc = [[_mm256_setzero_si256(); TILE_D]; TILE_Q];
        let mut k = 0;
        while k < len {
            // SAFETY: k + 16 <= len for every slice; unaligned loads are allowed.
            let dv: [__m256i; TILE_D] = core::array::from_fn(|j| unsafe {
                _mm256_loadu_si256(d[j].as_ptr().add(k).cast())
            });
            for i in 0..TILE_Q {
                // SAFETY: as above.
                let qv = unsafe { _mm256_loadu_si256(q[i].as_ptr().add(k).cast()) };
                for j in 0..TILE_D {
                    acc[i][j] = _mm256_add_epi32(acc[i][j], _mm256_madd_epi16(qv, dv[j]));
                }
            }
            k += 16;
        }
        let mut out = [[0u16; TILE_D]; TILE_Q];
        for i in 0..TILE_Q {
            for j in 0..TILE_D {
                let mut lanes = [0i32; 8];
                // SAFETY: lanes is 32 bytes.
                unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), acc[i][j]) };
                out[i][j] = lanes.iter().fold(0i32, |a, &b| a.wrapping_add(b)) as u16;
            }
        }
        out
    }
}

/// Multiply-adds per second one core sustains with `kernel`'s instruction on register-resident
/// data: the machine's u16 multiply-add peak that engine rates are compared against. The best
/// of five runs, so a run slowed by other load does not flatter the engine.
pub fn mac_peak(kernel: super::Kernel) -> f64 {
    const ITERS: u64 = 5_000_000;
    (0..5)
        .map(|_| {
            let start = std::time::Instant::now();
            let macs = match kernel {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the kernel was detected as supported.
                super::Kernel::Avx512Vnni => unsafe { peak_avx512_vnni(ITERS) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: as above.
                super::Kernel::Avx2 => unsafe { peak_avx2(ITERS) },
                _ => peak_scalar(ITERS / 8),
            };
            macs as f64 / start.elapsed().as_secs_f64()
        })
        .fold(0.0, f64::max)
}

fn peak_scalar(iters: u64) -> u64 {
    let mut acc = [1u16; 64];
    let x = std::hint::black_box([3u16; 64]);
    for _ in 0..iters {
        for (a, b) in acc.iter_mut().zip(x) {
            *a = a.wrapping_mul(b).wrapping_add(b);
        }
    }
    std::hint::black_box(acc);
    iters * 64
}
