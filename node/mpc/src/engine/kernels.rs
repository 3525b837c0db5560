//! Register-tiled micro-kernels: a tile of [`TILE_Q`] query vectors against [`TILE_D`]
//! database vectors, accumulating in 32-bit lanes (exact mod 2^16: products of u16 read as
//! i16 agree with the unsigned products mod 2^16, and i32 wrap-around keeps every sum exact
//! mod 2^32).

/// Proof that this CPU runs AVX-512 F, BW and VNNI. Only [`Avx512Vnni::detect`] makes one, so
/// a kernel that takes it can run those instructions safely.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Avx512Vnni(());

impl Avx512Vnni {
    /// The token, where the CPU has the features.
    pub fn detect() -> Option<Avx512Vnni> {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vnni")
        {
            return Some(Avx512Vnni(()));
        }
        None
    }
}

/// Proof that this CPU runs AVX2; only [`Avx2::detect`] makes one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Avx2(());

impl Avx2 {
    /// The token, where the CPU has the feature.
    pub fn detect() -> Option<Avx2> {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            return Some(Avx2(()));
        }
        None
    }
}

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

/// Checks what the SIMD tiles read: every vector as long as the first, a whole number of
/// `step`-element registers.
fn check_tile_lengths(q: &[&[u16]; TILE_Q], d: &[&[u16]; TILE_D], step: usize) {
    let len = q[0].len();
    assert!(
        len.is_multiple_of(step) && q.iter().chain(d.iter()).all(|v| v.len() == len),
        "tile vectors must have one length, a multiple of {step}"
    );
}

/// AVX-512 VNNI tile.
///
/// # Panics
/// If the vectors differ in length or the length is not a multiple of 32.
pub fn tile_avx512_vnni(_cpu: Avx512Vnni, q: &[&[u16]; TILE_Q], d: &[&[u16]; TILE_D]) -> Tile {
    check_tile_lengths(q, d, 32);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the token proves the CPU has the target features; the lengths were checked.
    return unsafe { x86::tile_avx512_vnni(q, d) };
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("no token exists off x86_64")
}

/// AVX2 tile.
///
/// # Panics
/// If the vectors differ in length or the length is not a multiple of 16.
pub fn tile_avx2(_cpu: Avx2, q: &[&[u16]; TILE_Q], d: &[&[u16]; TILE_D]) -> Tile {
    check_tile_lengths(q, d, 16);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the token proves the CPU has the target feature; the lengths were checked.
    return unsafe { x86::tile_avx2(q, d) };
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("no token exists off x86_64")
}

/// Multiply-adds per second one core issues with `vpdpwssd` (32 per instruction).
pub fn peak_avx512_vnni(_cpu: Avx512Vnni, iters: u64) -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the token proves the CPU has the target features; the loop touches registers only.
    return unsafe { x86::peak_avx512_vnni(iters) };
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("no token exists off x86_64")
}

/// Multiply-adds one core issues with `vpmaddwd` (16 per instruction).
pub fn peak_avx2(_cpu: Avx2, iters: u64) -> u64 {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the token proves the CPU has the target feature; the loop touches registers only.
    return unsafe { x86::peak_avx2(iters) };
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("no token exists off x86_64")
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use crate::engine::kernels::{Tile, TILE_D, TILE_Q};
    use core::arch::asm;
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

    /// `iters` rounds of 16 independent `vpdpwssd` accumulation chains; returns the
    /// multiply-adds issued. Written in assembly so the compiler can neither hoist nor fold
    /// the instructions whose rate it measures.
    ///
    /// # Safety
    /// The CPU must support `avx512f` and `avx512vnni`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn peak_avx512_vnni(iters: u64) -> u64 {
        if iters == 0 {
            return 0;
        }
        // SAFETY: register-only arithmetic on clobbered vector registers; the caller
        // guarantees the features.
        unsafe {
            asm!(
                "vpxord zmm0, zmm0, zmm0",
                "vpternlogd zmm16, zmm16, zmm16, 0xff",
                "vpternlogd zmm17, zmm17, zmm17, 0xff",
                "2:",
                "vpdpwssd zmm0, zmm16, zmm17",
                "vpdpwssd zmm1, zmm16, zmm17",
                "vpdpwssd zmm2, zmm16, zmm17",
                "vpdpwssd zmm3, zmm16, zmm17",
                "vpdpwssd zmm4, zmm16, zmm17",
                "vpdpwssd zmm5, zmm16, zmm17",
                "vpdpwssd zmm6, zmm16, zmm17",
                "vpdpwssd zmm7, zmm16, zmm17",
                "vpdpwssd zmm8, zmm16, zmm17",
                "vpdpwssd zmm9, zmm16, zmm17",
                "vpdpwssd zmm10, zmm16, zmm17",
                "vpdpwssd zmm11, zmm16, zmm17",
                "vpdpwssd zmm12, zmm16, zmm17",
                "vpdpwssd zmm13, zmm16, zmm17",
                "vpdpwssd zmm14, zmm16, zmm17",
                "vpdpwssd zmm15, zmm16, zmm17",
                "dec {n}",
                "jnz 2b",
                n = inout(reg) iters => _,
                out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _,
                out("zmm4") _, out("zmm5") _, out("zmm6") _, out("zmm7") _,
                out("zmm8") _, out("zmm9") _, out("zmm10") _, out("zmm11") _,
                out("zmm12") _, out("zmm13") _, out("zmm14") _, out("zmm15") _,
                out("zmm16") _, out("zmm17") _,
                options(nomem, nostack),
            );
        }
        iters * 16 * 32
    }

    /// `iters` rounds of 12 independent `vpmaddwd`; returns the multiply-adds issued.
    /// Assembly, as above: with intrinsics on constant operands the compiler hoists the
    /// multiply out of the loop and reports rates no core can issue.
    ///
    /// # Safety
    /// The CPU must support `avx2`.
    #[target_feature(enable = "avx2")]
    pub unsafe fn peak_avx2(iters: u64) -> u64 {
        if iters == 0 {
            return 0;
        }
        // SAFETY: register-only arithmetic on clobbered vector registers; the caller
        // guarantees the feature.
        unsafe {
            asm!(
                "vpcmpeqd ymm12, ymm12, ymm12",
                "vpcmpeqd ymm13, ymm13, ymm13",
                "2:",
                "vpmaddwd ymm0, ymm12, ymm13",
                "vpmaddwd ymm1, ymm12, ymm13",
                "vpmaddwd ymm2, ymm12, ymm13",
                "vpmaddwd ymm3, ymm12, ymm13",
                "vpmaddwd ymm4, ymm12, ymm13",
                "vpmaddwd ymm5, ymm12, ymm13",
                "vpmaddwd ymm6, ymm12, ymm13",
                "vpmaddwd ymm7, ymm12, ymm13",
                "vpmaddwd ymm8, ymm12, ymm13",
                "vpmaddwd ymm9, ymm12, ymm13",
                "vpmaddwd ymm10, ymm12, ymm13",
                "vpmaddwd ymm11, ymm12, ymm13",
                "dec {n}",
                "jnz 2b",
                n = inout(reg) iters => _,
                out("ymm0") _, out("ymm1") _, out("ymm2") _, out("ymm3") _,
                out("ymm4") _, out("ymm5") _, out("ymm6") _, out("ymm7") _,
                out("ymm8") _, out("ymm9") _, out("ymm10") _, out("ymm11") _,
                out("ymm12") _, out("ymm13") _,
                options(nomem, nostack),
            );
        }
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

/// Multiply-adds one core issues with the portable kernel's scalar multiply-add.
pub fn peak_scalar(iters: u64) -> u64 {
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
