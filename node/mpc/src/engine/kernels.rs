//! Register-tiled micro-kernels: a tile of query vectors against database vectors over one
//! chunk of the vector length, adding into 32-bit lane accumulators that live in memory
//! between chunks (exact mod 2^16: products of u16 read as i16 agree with the unsigned
//! products mod 2^16, and i32 wrap-around keeps every sum exact mod 2^32).
//!
//! The tile shape is per kernel: it is what the instruction set's registers hold without
//! spilling.

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

/// A tile's accumulators, `[query][db][lane]`; a result is the wrapping sum of its lanes.
pub type Acc<const Q: usize, const D: usize, const L: usize> = [[[i32; L]; D]; Q];

/// The result of one accumulator, mod 2^16.
pub fn reduce<const L: usize>(lanes: &[i32; L]) -> u16 {
    lanes.iter().fold(0i32, |a, &b| a.wrapping_add(b)) as u16
}

/// AVX-512 tile: 6 x 4 accumulators plus 4 database vectors and one query vector fit the 32
/// registers, 10 loads per 24 `vpdpwssd`.
pub const VNNI_Q: usize = 6;
/// Database vectors per AVX-512 tile.
pub const VNNI_D: usize = 4;
/// i32 lanes of a zmm register.
pub const VNNI_LANES: usize = 16;
/// AVX2 tile: 4 x 3 accumulators, 2 database vectors, one query vector and one product fill
/// the 16 ymm registers (the 6 x 4 tile spilled), the third database vector read as a memory
/// operand: 10 loads per 12 `vpmaddwd`.
pub const AVX2_Q: usize = 4;
/// Database vectors per AVX2 tile.
pub const AVX2_D: usize = 3;
/// i32 lanes of a ymm register.
pub const AVX2_LANES: usize = 8;

/// Asks the CPU to bring `data` into L2 ahead of its use (a hint: no effect on results).
pub fn prefetch(data: &[u16]) {
    #[cfg(target_arch = "x86_64")]
    for line in data.chunks(32) {
        // SAFETY: SSE is part of x86_64; a prefetch reads nothing architecturally and cannot
        // fault, and the address is inside a live slice anyway.
        unsafe {
            core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T1 }>(
                line.as_ptr().cast(),
            )
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = data;
}

/// Portable fallback: one lane per accumulator.
///
/// # Panics
/// As [`chunk_avx2`], for any length.
pub fn chunk_scalar<const Q: usize, const D: usize>(
    q: &[u16],
    d: &[u16],
    d_stride: usize,
    acc: &mut Acc<Q, D, 1>,
) {
    let len = check_lengths(q, Q, d, d_stride, D, 1);
    for (qi, row) in q.chunks_exact(len).zip(acc.iter_mut()) {
        for (j, a) in row.iter_mut().enumerate() {
            let dj = &d[j * d_stride..j * d_stride + len];
            a[0] = qi.iter().zip(dj.iter()).fold(a[0], |s, (&x, &y)| {
                s.wrapping_add(i32::from(x as i16) * i32::from(y as i16))
            });
        }
    }
}

/// Checks what a tile reads: `rows_q` query vectors back to back in `q`, and `rows_d`
/// database vectors in `d`, the `j`-th at `j * d_stride`, all of one length, a whole number
/// of `step`-element registers; returns the length.
#[inline(always)]
fn check_lengths(
    q: &[u16],
    rows_q: usize,
    d: &[u16],
    d_stride: usize,
    rows_d: usize,
    step: usize,
) -> usize {
    // `rows_q` is a constant in every caller, so this divides by a constant.
    let len = q.len() / rows_q;
    assert!(
        len.is_multiple_of(step)
            && q.len() == rows_q * len
            && d_stride >= len
            && d.len() >= (rows_d - 1) * d_stride + len,
        "a tile's vectors must have one length, a multiple of {step}"
    );
    len
}

/// AVX-512 VNNI tile over one chunk: `q` holds [`VNNI_Q`] vectors back to back, `d`
/// [`VNNI_D`] at a stride of `d_stride` elements (the chunk of rows in place).
///
/// # Panics
/// If the vectors differ in length, the length is not a multiple of 32, or `d` is too short.
pub fn chunk_avx512_vnni(
    _cpu: Avx512Vnni,
    q: &[u16],
    d: &[u16],
    d_stride: usize,
    acc: &mut Acc<VNNI_Q, VNNI_D, VNNI_LANES>,
) {
    let len = check_lengths(q, VNNI_Q, d, d_stride, VNNI_D, 32);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the token proves the CPU has the target features; the lengths were checked.
    unsafe {
        x86::chunk_avx512_vnni(q, d, len, d_stride, acc)
    };
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("no token exists off x86_64")
}

/// AVX2 tile over one chunk: `q` holds [`AVX2_Q`] vectors back to back, `d` [`AVX2_D`] at a
/// stride of `d_stride` elements.
///
/// # Panics
/// If the vectors differ in length, the length is not a multiple of 16, or `d` is too short.
pub fn chunk_avx2(
    _cpu: Avx2,
    q: &[u16],
    d: &[u16],
    d_stride: usize,
    acc: &mut Acc<AVX2_Q, AVX2_D, AVX2_LANES>,
) {
    let len = check_lengths(q, AVX2_Q, d, d_stride, AVX2_D, 16);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the token proves the CPU has the target feature; the lengths were checked.
    unsafe {
        x86::chunk_avx2(q, d, len, d_stride, acc)
    };
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("no token exists off x86_64")
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Acc, AVX2_D, AVX2_LANES, AVX2_Q, VNNI_D, VNNI_LANES, VNNI_Q};
    use core::arch::asm;

    /// AVX-512 VNNI: `vpdpwssd` multiplies 32 pairs of i16 and adds adjacent products into
    /// 16 i32 lanes. Assembly: LLVM splits most `vpdpwssd` intrinsics into `vpmaddwd` plus
    /// `vpaddd`, twice the instructions, and the tile then reached about 60 % of the peak.
    ///
    /// # Safety
    /// The CPU must support `avx512f`, `avx512bw` and `avx512vnni`; `q` must hold [`VNNI_Q`]
    /// vectors of `len`, a multiple of 32, back to back, and `d` [`VNNI_D`] of `len` starting
    /// `d_stride` elements apart.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn chunk_avx512_vnni(
        q: &[u16],
        d: &[u16],
        len: usize,
        d_stride: usize,
        acc: &mut Acc<VNNI_Q, VNNI_D, VNNI_LANES>,
    ) {
        const _: () = assert!(VNNI_Q == 6 && VNNI_D == 4 && VNNI_LANES == 16);
        if len == 0 {
            return;
        }
        let stride = len * 2;
        // SAFETY: `acc` is 24 x 64 bytes, read and written back whole. Each of the len / 32
        // iterations reads 64 bytes at byte offset k of every vector (k < len * 2, stepping
        // by 64): inside `q` (6 vectors of `len` back to back; q + 4 * stride is the fifth)
        // and `d` (4 vectors of `len`, d_stride apart). Unaligned loads are allowed; the
        // caller guarantees the features.
        unsafe {
            asm!(
                "vmovdqu64 zmm0, [{a} + 0]",
                "vmovdqu64 zmm1, [{a} + 64]",
                "vmovdqu64 zmm2, [{a} + 128]",
                "vmovdqu64 zmm3, [{a} + 192]",
                "vmovdqu64 zmm4, [{a} + 256]",
                "vmovdqu64 zmm5, [{a} + 320]",
                "vmovdqu64 zmm6, [{a} + 384]",
                "vmovdqu64 zmm7, [{a} + 448]",
                "vmovdqu64 zmm8, [{a} + 512]",
                "vmovdqu64 zmm9, [{a} + 576]",
                "vmovdqu64 zmm10, [{a} + 640]",
                "vmovdqu64 zmm11, [{a} + 704]",
                "vmovdqu64 zmm12, [{a} + 768]",
                "vmovdqu64 zmm13, [{a} + 832]",
                "vmovdqu64 zmm14, [{a} + 896]",
                "vmovdqu64 zmm15, [{a} + 960]",
                "vmovdqu64 zmm16, [{a} + 1024]",
                "vmovdqu64 zmm17, [{a} + 1088]",
                "vmovdqu64 zmm18, [{a} + 1152]",
                "vmovdqu64 zmm19, [{a} + 1216]",
                "vmovdqu64 zmm20, [{a} + 1280]",
                "vmovdqu64 zmm21, [{a} + 1344]",
                "vmovdqu64 zmm22, [{a} + 1408]",
                "vmovdqu64 zmm23, [{a} + 1472]",
                "2:",
                "vmovdqu64 zmm24, [{d}]",
                "vmovdqu64 zmm25, [{d} + {sd}]",
                "vmovdqu64 zmm26, [{d} + 2*{sd}]",
                "vmovdqu64 zmm27, [{d} + {sd3}]",
                "vmovdqu64 zmm28, [{q}]",
                "vpdpwssd zmm0, zmm28, zmm24",
                "vpdpwssd zmm1, zmm28, zmm25",
                "vpdpwssd zmm2, zmm28, zmm26",
                "vpdpwssd zmm3, zmm28, zmm27",
                "vmovdqu64 zmm29, [{q} + {s}]",
                "vpdpwssd zmm4, zmm29, zmm24",
                "vpdpwssd zmm5, zmm29, zmm25",
                "vpdpwssd zmm6, zmm29, zmm26",
                "vpdpwssd zmm7, zmm29, zmm27",
                "vmovdqu64 zmm28, [{q} + 2*{s}]",
                "vpdpwssd zmm8, zmm28, zmm24",
                "vpdpwssd zmm9, zmm28, zmm25",
                "vpdpwssd zmm10, zmm28, zmm26",
                "vpdpwssd zmm11, zmm28, zmm27",
                "vmovdqu64 zmm29, [{q} + {s3}]",
                "vpdpwssd zmm12, zmm29, zmm24",
                "vpdpwssd zmm13, zmm29, zmm25",
                "vpdpwssd zmm14, zmm29, zmm26",
                "vpdpwssd zmm15, zmm29, zmm27",
                "vmovdqu64 zmm28, [{q4}]",
                "vpdpwssd zmm16, zmm28, zmm24",
                "vpdpwssd zmm17, zmm28, zmm25",
                "vpdpwssd zmm18, zmm28, zmm26",
                "vpdpwssd zmm19, zmm28, zmm27",
                "vmovdqu64 zmm29, [{q4} + {s}]",
                "vpdpwssd zmm20, zmm29, zmm24",
                "vpdpwssd zmm21, zmm29, zmm25",
                "vpdpwssd zmm22, zmm29, zmm26",
                "vpdpwssd zmm23, zmm29, zmm27",
                "add {q}, 64",
                "add {q4}, 64",
                "add {d}, 64",
                "dec {n}",
                "jnz 2b",
                "vmovdqu64 [{a} + 0], zmm0",
                "vmovdqu64 [{a} + 64], zmm1",
                "vmovdqu64 [{a} + 128], zmm2",
                "vmovdqu64 [{a} + 192], zmm3",
                "vmovdqu64 [{a} + 256], zmm4",
                "vmovdqu64 [{a} + 320], zmm5",
                "vmovdqu64 [{a} + 384], zmm6",
                "vmovdqu64 [{a} + 448], zmm7",
                "vmovdqu64 [{a} + 512], zmm8",
                "vmovdqu64 [{a} + 576], zmm9",
                "vmovdqu64 [{a} + 640], zmm10",
                "vmovdqu64 [{a} + 704], zmm11",
                "vmovdqu64 [{a} + 768], zmm12",
                "vmovdqu64 [{a} + 832], zmm13",
                "vmovdqu64 [{a} + 896], zmm14",
                "vmovdqu64 [{a} + 960], zmm15",
                "vmovdqu64 [{a} + 1024], zmm16",
                "vmovdqu64 [{a} + 1088], zmm17",
                "vmovdqu64 [{a} + 1152], zmm18",
                "vmovdqu64 [{a} + 1216], zmm19",
                "vmovdqu64 [{a} + 1280], zmm20",
                "vmovdqu64 [{a} + 1344], zmm21",
                "vmovdqu64 [{a} + 1408], zmm22",
                "vmovdqu64 [{a} + 1472], zmm23",
                a = in(reg) acc.as_mut_ptr(),
                q = inout(reg) q.as_ptr() => _,
                q4 = inout(reg) q.as_ptr().add(4 * len) => _,
                d = inout(reg) d.as_ptr() => _,
                s = in(reg) stride,
                s3 = in(reg) 3 * stride,
                sd = in(reg) d_stride * 2,
                sd3 = in(reg) d_stride * 6,
                n = inout(reg) len / 32 => _,
                out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _,
                out("zmm4") _, out("zmm5") _, out("zmm6") _, out("zmm7") _,
                out("zmm8") _, out("zmm9") _, out("zmm10") _, out("zmm11") _,
                out("zmm12") _, out("zmm13") _, out("zmm14") _, out("zmm15") _,
                out("zmm16") _, out("zmm17") _, out("zmm18") _, out("zmm19") _,
                out("zmm20") _, out("zmm21") _, out("zmm22") _, out("zmm23") _,
                out("zmm24") _, out("zmm25") _, out("zmm26") _, out("zmm27") _,
                out("zmm28") _, out("zmm29") _,
                options(nostack),
            );
        }
    }

    /// AVX2: `vpmaddwd` multiplies 16 pairs of i16 and adds adjacent products into 8 i32
    /// lanes; `vpaddd` accumulates them. Assembly, to place the 16 registers exactly: 12
    /// accumulators, 2 database vectors, the query vector and the product; the third database
    /// vector is a memory operand.
    ///
    /// # Safety
    /// The CPU must support `avx2`; `q` must hold [`AVX2_Q`] vectors of `len`, a multiple of
    /// 16, back to back, and `d` [`AVX2_D`] of `len` starting `d_stride` elements apart.
    #[target_feature(enable = "avx2")]
    pub unsafe fn chunk_avx2(
        q: &[u16],
        d: &[u16],
        len: usize,
        d_stride: usize,
        acc: &mut Acc<AVX2_Q, AVX2_D, AVX2_LANES>,
    ) {
        const _: () = assert!(AVX2_Q == 4 && AVX2_D == 3 && AVX2_LANES == 8);
        if len == 0 {
            return;
        }
        let stride = len * 2;
        // SAFETY: `acc` is 12 x 32 bytes, read and written back whole. Each of the len / 16
        // iterations reads 32 bytes at byte offset k of every vector (k < len * 2, stepping
        // by 32): inside `q` (4 vectors of `len` back to back) and `d` (3 vectors of `len`,
        // d_stride apart). Unaligned loads are allowed; the caller guarantees the feature.
        unsafe {
            asm!(
                "vmovdqu ymm0, [{a} + 0]",
                "vmovdqu ymm1, [{a} + 32]",
                "vmovdqu ymm2, [{a} + 64]",
                "vmovdqu ymm3, [{a} + 96]",
                "vmovdqu ymm4, [{a} + 128]",
                "vmovdqu ymm5, [{a} + 160]",
                "vmovdqu ymm6, [{a} + 192]",
                "vmovdqu ymm7, [{a} + 224]",
                "vmovdqu ymm8, [{a} + 256]",
                "vmovdqu ymm9, [{a} + 288]",
                "vmovdqu ymm10, [{a} + 320]",
                "vmovdqu ymm11, [{a} + 352]",
                "2:",
                "vmovdqu ymm12, [{d}]",
                "vmovdqu ymm13, [{d} + {sd}]",
                "vmovdqu ymm14, [{q}]",
                "vpmaddwd ymm15, ymm14, ymm12",
                "vpaddd ymm0, ymm0, ymm15",
                "vpmaddwd ymm15, ymm14, ymm13",
                "vpaddd ymm1, ymm1, ymm15",
                "vpmaddwd ymm15, ymm14, [{d} + 2*{sd}]",
                "vpaddd ymm2, ymm2, ymm15",
                "vmovdqu ymm14, [{q} + {s}]",
                "vpmaddwd ymm15, ymm14, ymm12",
                "vpaddd ymm3, ymm3, ymm15",
                "vpmaddwd ymm15, ymm14, ymm13",
                "vpaddd ymm4, ymm4, ymm15",
                "vpmaddwd ymm15, ymm14, [{d} + 2*{sd}]",
                "vpaddd ymm5, ymm5, ymm15",
                "vmovdqu ymm14, [{q} + 2*{s}]",
                "vpmaddwd ymm15, ymm14, ymm12",
                "vpaddd ymm6, ymm6, ymm15",
                "vpmaddwd ymm15, ymm14, ymm13",
                "vpaddd ymm7, ymm7, ymm15",
                "vpmaddwd ymm15, ymm14, [{d} + 2*{sd}]",
                "vpaddd ymm8, ymm8, ymm15",
                "vmovdqu ymm14, [{q} + {s3}]",
                "vpmaddwd ymm15, ymm14, ymm12",
                "vpaddd ymm9, ymm9, ymm15",
                "vpmaddwd ymm15, ymm14, ymm13",
                "vpaddd ymm10, ymm10, ymm15",
                "vpmaddwd ymm15, ymm14, [{d} + 2*{sd}]",
                "vpaddd ymm11, ymm11, ymm15",
                "add {q}, 32",
                "add {d}, 32",
                "dec {n}",
                "jnz 2b",
                "vmovdqu [{a} + 0], ymm0",
                "vmovdqu [{a} + 32], ymm1",
                "vmovdqu [{a} + 64], ymm2",
                "vmovdqu [{a} + 96], ymm3",
                "vmovdqu [{a} + 128], ymm4",
                "vmovdqu [{a} + 160], ymm5",
                "vmovdqu [{a} + 192], ymm6",
                "vmovdqu [{a} + 224], ymm7",
                "vmovdqu [{a} + 256], ymm8",
                "vmovdqu [{a} + 288], ymm9",
                "vmovdqu [{a} + 320], ymm10",
                "vmovdqu [{a} + 352], ymm11",
                a = in(reg) acc.as_mut_ptr(),
                q = inout(reg) q.as_ptr() => _,
                d = inout(reg) d.as_ptr() => _,
                s = in(reg) stride,
                s3 = in(reg) 3 * stride,
                sd = in(reg) d_stride * 2,
                n = inout(reg) len / 16 => _,
                out("ymm0") _, out("ymm1") _, out("ymm2") _, out("ymm3") _,
                out("ymm4") _, out("ymm5") _, out("ymm6") _, out("ymm7") _,
                out("ymm8") _, out("ymm9") _, out("ymm10") _, out("ymm11") _,
                out("ymm12") _, out("ymm13") _, out("ymm14") _, out("ymm15") _,
                options(nostack),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::ChaCha20Rng;
    use rand_core::{RngCore, SeedableRng};

    /// What a SIMD tile adds to its accumulators (summed over lanes) equals what the portable
    /// tile adds, from non-zero accumulators and with database rows in place (stride above
    /// the length), as the engine calls them chunk after chunk.
    #[test]
    fn simd_tiles_add_what_the_portable_tile_adds() {
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        let mut random = |n: usize| -> Vec<u16> { (0..n).map(|_| rng.next_u32() as u16).collect() };
        let (len, stride) = (128, 200);
        let q = random(VNNI_Q * len);
        let d = random(3 * stride + len);
        let mut scalar = [[[0i32; 1]; VNNI_D]; VNNI_Q];
        chunk_scalar(&q, &d, stride, &mut scalar);
        let start = |i: usize, j: usize| (i * 31 + j * 7) as i32 - 50;
        let sums = |lanes: &[i32]| lanes.iter().fold(0i32, |a, &b| a.wrapping_add(b));
        if let Some(cpu) = Avx512Vnni::detect() {
            let mut acc = [[[0i32; VNNI_LANES]; VNNI_D]; VNNI_Q];
            for (i, row) in acc.iter_mut().enumerate() {
                for (j, a) in row.iter_mut().enumerate() {
                    a[3] = start(i, j);
                }
            }
            chunk_avx512_vnni(cpu, &q, &d, stride, &mut acc);
            for (i, row) in acc.iter().enumerate() {
                for (j, a) in row.iter().enumerate() {
                    assert_eq!(sums(a), scalar[i][j][0].wrapping_add(start(i, j)));
                }
            }
        }
        if let Some(cpu) = Avx2::detect() {
            let mut acc = [[[0i32; AVX2_LANES]; AVX2_D]; AVX2_Q];
            for (i, row) in acc.iter_mut().enumerate() {
                for (j, a) in row.iter_mut().enumerate() {
                    a[5] = start(i, j);
                }
            }
            chunk_avx2(cpu, &q[..AVX2_Q * len], &d, stride, &mut acc);
            for (i, row) in acc.iter().enumerate() {
                for (j, a) in row.iter().enumerate() {
                    assert_eq!(sums(a), scalar[i][j][0].wrapping_add(start(i, j)));
                }
            }
        }
    }
}
