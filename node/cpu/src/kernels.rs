//! Register tiles with broadcast: a tile holds `P` query rows across the lanes of its
//! accumulators and `D` database rows. Query rows come interleaved (coefficient pair `k` of
//! every row of the tile side by side, then pair `k + 1`), so one vector load brings a pair of
//! `P / lanes` rows per register, and each database row's pair is broadcast to every lane.
//! Every lane of every accumulator is then one result: no horizontal sums, and the
//! accumulators stay in registers for as long a stretch of the vector as the caller passes
//! (exact mod 2^16: products of u16 read as i16 agree with the unsigned products mod 2^16,
//! and i32 wrap-around keeps every sum exact mod 2^32).
//!
//! The tile shape is per kernel: what the instruction set's registers hold without spilling.
//!
//! A database row's pairs come in couples, two pairs side by side (`k = 2i` and `2i + 1` at
//! coefficients `i * couple` and `i * couple + 2`): [`CONTIGUOUS`] where the row is its own
//! coefficients, wider where a tile reads every fourth element of a row in place (the
//! correlation leaves that are a row's own elements, [`crate::correlate`]).

pub mod generic;

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

/// The CPU model as `cpuid` names it: what a tuning result is kept for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuModel {
    /// Vendor string (`GenuineIntel`, `AuthenticAMD`); empty off x86_64.
    pub vendor: String,
    /// Family, with the extended family added.
    pub family: u32,
    /// Model, with the extended model in its high bits.
    pub model: u32,
}

impl CpuModel {
    /// This CPU's model.
    pub fn detect() -> CpuModel {
        #[cfg(target_arch = "x86_64")]
        {
            use core::arch::x86_64::__cpuid;
            let id = __cpuid(0);
            let vendor: Vec<u8> = [id.ebx, id.edx, id.ecx]
                .iter()
                .flat_map(|r| r.to_le_bytes())
                .collect();
            let eax = __cpuid(1).eax;
            let (base_family, base_model) = ((eax >> 8) & 0xf, (eax >> 4) & 0xf);
            let family = base_family
                + if base_family == 0xf {
                    (eax >> 20) & 0xff
                } else {
                    0
                };
            let model = base_model
                | if base_family == 0x6 || base_family == 0xf {
                    ((eax >> 16) & 0xf) << 4
                } else {
                    0
                };
            CpuModel {
                vendor: String::from_utf8_lossy(&vendor).into_owned(),
                family,
                model,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        CpuModel {
            vendor: String::new(),
            family: 0,
            model: 0,
        }
    }
}

/// A tile's accumulators, `[database row][query row]`: each is one result, exact mod 2^32.
pub type Acc<const P: usize, const D: usize> = [[i32; P]; D];

/// AVX-512 tile: 32 query rows (two zmm of lanes) by 12 database rows, 24 accumulators, the
/// two query vectors and four broadcasts in the 32 registers: 14 loads per 24 `vpdpwssd`.
pub const VNNI_P: usize = 32;
/// Database rows per AVX-512 tile.
pub const VNNI_D: usize = 12;
/// AVX2 tile: 16 query rows (two ymm) by 6 database rows, 12 accumulators, the two query
/// vectors, one broadcast and one product fill the 16 registers: 8 loads per 12 `vpmaddwd`.
pub const AVX2_P: usize = 16;
/// Database rows per AVX2 tile.
pub const AVX2_D: usize = 6;
/// Portable tile.
pub const SCALAR_P: usize = 8;
/// Database rows per portable tile.
pub const SCALAR_D: usize = 4;

/// Couple width of a row that is its own coefficients: pair `k` at `2 * k`.
pub const CONTIGUOUS: usize = 4;

/// Where pair `k` of a database row starts, in a row of couples `couple` wide.
#[inline(always)]
const fn pair_at(k: usize, couple: usize) -> usize {
    k / 2 * couple + 2 * (k % 2)
}

/// Checks what a tile reads and returns its coefficient pairs: `qp` holds `p` query rows
/// interleaved (pair `k` of every row, row after row, then pair `k + 1`), and `d` holds
/// `rows_d` database rows of as many pairs in couples `couple` wide, the `j`-th at
/// `j * d_stride`.
#[inline(always)]
fn check_tile(
    qp: &[u16],
    p: usize,
    d: &[u16],
    d_stride: usize,
    couple: usize,
    rows_d: usize,
) -> usize {
    // `p` is a constant in every caller, so this divides by a constant.
    let pairs = qp.len() / (2 * p);
    // The coefficients a row's pairs reach.
    let span = pairs
        .checked_sub(1)
        .map_or(0, |last| pair_at(last, couple) + 2);
    assert!(
        qp.len() == 2 * p * pairs
            && couple >= CONTIGUOUS
            && couple.is_multiple_of(2)
            && d_stride >= span
            && d.len() >= (rows_d - 1) * d_stride + span,
        "a tile's rows must have one even length"
    );
    pairs
}

/// Adds the products of pairs `pairs` of a tile (checked by [`check_tile`]) into `acc`.
fn scalar_pairs<const P: usize, const D: usize>(
    qp: &[u16],
    d: &[u16],
    (d_stride, couple): (usize, usize),
    pairs: core::ops::Range<usize>,
    acc: &mut Acc<P, D>,
) {
    let s = |x: u16| i32::from(x as i16);
    for k in pairs {
        let q = &qp[k * 2 * P..(k + 1) * 2 * P];
        let at = pair_at(k, couple);
        for (j, row) in acc.iter_mut().enumerate() {
            let (d0, d1) = (s(d[j * d_stride + at]), s(d[j * d_stride + at + 1]));
            for (a, q) in row.iter_mut().zip(q.chunks_exact(2)) {
                *a = a.wrapping_add((s(q[0]) * d0).wrapping_add(s(q[1]) * d1));
            }
        }
    }
}

/// Portable tile: `P` interleaved query rows against `D` database rows, added into `acc`.
///
/// # Panics
/// As [`tile_avx512_vnni`].
pub fn tile_scalar<const P: usize, const D: usize>(
    qp: &[u16],
    d: &[u16],
    d_stride: usize,
    couple: usize,
    acc: &mut Acc<P, D>,
) {
    let pairs = check_tile(qp, P, d, d_stride, couple, D);
    scalar_pairs(qp, d, (d_stride, couple), 0..pairs, acc);
}

/// AVX-512 VNNI tile: [`VNNI_P`] interleaved query rows against [`VNNI_D`] database rows at a
/// stride of `d_stride` elements, in couples `couple` wide, added into `acc`.
///
/// # Panics
/// If `qp` is not [`VNNI_P`] rows of one even length, or `d` is too short for it.
pub fn tile_avx512_vnni(
    _cpu: Avx512Vnni,
    qp: &[u16],
    d: &[u16],
    d_stride: usize,
    couple: usize,
    acc: &mut Acc<VNNI_P, VNNI_D>,
) {
    let pairs = check_tile(qp, VNNI_P, d, d_stride, couple, VNNI_D);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the token proves the CPU has the target features; the lengths were checked.
    let done = unsafe {
        x86::tile_avx512_vnni(qp, d, (d_stride, couple), pairs / 2, acc);
        pairs / 2 * 2
    };
    // No token exists off x86_64; the portable loop would do every pair.
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    // An odd last pair: rare (vector lengths are multiples of 64 in every engine call).
    scalar_pairs(qp, d, (d_stride, couple), done..pairs, acc);
}

/// AVX2 tile: [`AVX2_P`] interleaved query rows against [`AVX2_D`] database rows at a stride
/// of `d_stride` elements, contiguous, added into `acc`. Contiguous only: reading a row in
/// place in wider couples measured slower than copying its leaves with this tile (its
/// broadcasts are twice as many per multiply-add as AVX-512's).
///
/// # Panics
/// If `qp` is not [`AVX2_P`] rows of one even length, or `d` is too short for it.
pub fn tile_avx2(
    _cpu: Avx2,
    qp: &[u16],
    d: &[u16],
    d_stride: usize,
    acc: &mut Acc<AVX2_P, AVX2_D>,
) {
    let pairs = check_tile(qp, AVX2_P, d, d_stride, CONTIGUOUS, AVX2_D);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the token proves the CPU has the target feature; the lengths were checked.
    unsafe {
        x86::tile_avx2(qp, d, pairs, d_stride, acc)
    };
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("no token exists off x86_64")
}

/// The leaves of a database row that are its own elements, `z_r` for leaf `s` at `[s] ==
/// Some(r)` ([`crate::correlate::db_leaves`]): a tile reads them from the row in place, element `r` of every
/// group of four, in couples [`crate::correlate::DIRECT_COUPLE`] wide from coefficient `ELEMENT * r` on,
/// instead of from a copy.
pub const DIRECT_LEAVES: [Option<usize>; 9] = [
    None,
    None,
    None,
    None,
    Some(3),
    Some(1),
    None,
    Some(2),
    Some(0),
];

/// The nine correlation leaves of database row `y` ([`crate::correlate::db_leaves`]),
/// or its five sums alone (`all` false): four groups of four elements per step, transposed
/// so that each leaf is a vertical sum.
///
/// # Panics
/// If `y` is not a whole number of 64-coefficient steps or `out` cannot hold nine leaves at
/// `stride`.
pub fn leaves_avx2(_cpu: Avx2, y: &[u16], out: &mut [u16], stride: usize, all: bool) {
    let steps = y.len() / 64;
    assert!(
        y.len() == 64 * steps && stride >= 16 * steps && out.len() >= 8 * stride + 16 * steps,
        "a row of whole steps and room for nine leaves"
    );
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the token proves the CPU has the target feature; the lengths were checked.
    unsafe {
        if all {
            x86::leaves_avx2::<true>(y, out, stride, steps)
        } else {
            x86::leaves_avx2::<false>(y, out, stride, steps)
        }
    };
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("no token exists off x86_64")
}

/// Asks the core to bring the cache line at the start of `data` into L2 ahead of its use; a
/// hint, with no effect off x86_64.
#[inline(always)]
pub fn prefetch(data: &[u16]) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and changes nothing that is observable; SSE is part of
    // every x86_64 CPU.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T1 }>(
            data.as_ptr().cast(),
        )
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = data;
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::DIRECT_LEAVES;
    use super::{Acc, AVX2_D, AVX2_P, VNNI_D, VNNI_P};
    use core::arch::asm;

    /// AVX-512 VNNI: `vpdpwssd` multiplies 32 pairs of i16 and adds adjacent products into
    /// 16 i32 lanes; here the lanes are 16 query rows and the other operand is one database
    /// row's pair broadcast. Assembly: LLVM splits most `vpdpwssd` intrinsics into
    /// `vpmaddwd` plus `vpaddd`, twice the instructions. A couple of pairs per iteration, so
    /// the rows can advance by more than a pair's width.
    ///
    /// # Safety
    /// The CPU must support `avx512f`, `avx512bw` and `avx512vnni`; `qp` must hold
    /// `2 * couples` steps of [`VNNI_P`] interleaved pairs, and `d` [`VNNI_D`] rows starting
    /// `d_stride` elements apart, each reaching `couples * couple` elements.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn tile_avx512_vnni(
        qp: &[u16],
        d: &[u16],
        (d_stride, couple): (usize, usize),
        couples: usize,
        acc: &mut Acc<VNNI_P, VNNI_D>,
    ) {
        const _: () = assert!(VNNI_P == 32 && VNNI_D == 12);
        if couples == 0 {
            return;
        }
        let sd = d_stride * 2;
        // SAFETY: `acc` is 24 x 64 bytes, read and written back whole. Couple i reads 256
        // bytes of `qp` at 256 * i (inside its `2 * couples` steps) and 4 bytes at each of
        // adv * i and adv * i + 4 of each database row j (at byte j * sd, j < 12; `d4` and
        // `d8` start at rows 4 and 8; adv = 2 * couple): inside `d`. Unaligned loads are
        // allowed; the caller guarantees the features.
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
                // The loop from a cache line on, so its speed does not depend on where the
                // linker places it.
                ".p2align 6",
                "2:",
                "vmovdqu64 zmm24, [{q} + 0]",
                "vmovdqu64 zmm25, [{q} + 64]",
                "vpbroadcastd zmm26, dword ptr [{d}]",
                "vpdpwssd zmm0, zmm24, zmm26",
                "vpdpwssd zmm1, zmm25, zmm26",
                "vpbroadcastd zmm27, dword ptr [{d} + {sd}]",
                "vpdpwssd zmm2, zmm24, zmm27",
                "vpdpwssd zmm3, zmm25, zmm27",
                "vpbroadcastd zmm28, dword ptr [{d} + 2*{sd}]",
                "vpdpwssd zmm4, zmm24, zmm28",
                "vpdpwssd zmm5, zmm25, zmm28",
                "vpbroadcastd zmm29, dword ptr [{d} + {sd3}]",
                "vpdpwssd zmm6, zmm24, zmm29",
                "vpdpwssd zmm7, zmm25, zmm29",
                "vpbroadcastd zmm26, dword ptr [{d4}]",
                "vpdpwssd zmm8, zmm24, zmm26",
                "vpdpwssd zmm9, zmm25, zmm26",
                "vpbroadcastd zmm27, dword ptr [{d4} + {sd}]",
                "vpdpwssd zmm10, zmm24, zmm27",
                "vpdpwssd zmm11, zmm25, zmm27",
                "vpbroadcastd zmm28, dword ptr [{d4} + 2*{sd}]",
                "vpdpwssd zmm12, zmm24, zmm28",
                "vpdpwssd zmm13, zmm25, zmm28",
                "vpbroadcastd zmm29, dword ptr [{d4} + {sd3}]",
                "vpdpwssd zmm14, zmm24, zmm29",
                "vpdpwssd zmm15, zmm25, zmm29",
                "vpbroadcastd zmm26, dword ptr [{d8}]",
                "vpdpwssd zmm16, zmm24, zmm26",
                "vpdpwssd zmm17, zmm25, zmm26",
                "vpbroadcastd zmm27, dword ptr [{d8} + {sd}]",
                "vpdpwssd zmm18, zmm24, zmm27",
                "vpdpwssd zmm19, zmm25, zmm27",
                "vpbroadcastd zmm28, dword ptr [{d8} + 2*{sd}]",
                "vpdpwssd zmm20, zmm24, zmm28",
                "vpdpwssd zmm21, zmm25, zmm28",
                "vpbroadcastd zmm29, dword ptr [{d8} + {sd3}]",
                "vpdpwssd zmm22, zmm24, zmm29",
                "vpdpwssd zmm23, zmm25, zmm29",
                "vmovdqu64 zmm24, [{q} + 128]",
                "vmovdqu64 zmm25, [{q} + 192]",
                "vpbroadcastd zmm26, dword ptr [{d} + 4]",
                "vpdpwssd zmm0, zmm24, zmm26",
                "vpdpwssd zmm1, zmm25, zmm26",
                "vpbroadcastd zmm27, dword ptr [{d} + {sd} + 4]",
                "vpdpwssd zmm2, zmm24, zmm27",
                "vpdpwssd zmm3, zmm25, zmm27",
                "vpbroadcastd zmm28, dword ptr [{d} + 2*{sd} + 4]",
                "vpdpwssd zmm4, zmm24, zmm28",
                "vpdpwssd zmm5, zmm25, zmm28",
                "vpbroadcastd zmm29, dword ptr [{d} + {sd3} + 4]",
                "vpdpwssd zmm6, zmm24, zmm29",
                "vpdpwssd zmm7, zmm25, zmm29",
                "vpbroadcastd zmm26, dword ptr [{d4} + 4]",
                "vpdpwssd zmm8, zmm24, zmm26",
                "vpdpwssd zmm9, zmm25, zmm26",
                "vpbroadcastd zmm27, dword ptr [{d4} + {sd} + 4]",
                "vpdpwssd zmm10, zmm24, zmm27",
                "vpdpwssd zmm11, zmm25, zmm27",
                "vpbroadcastd zmm28, dword ptr [{d4} + 2*{sd} + 4]",
                "vpdpwssd zmm12, zmm24, zmm28",
                "vpdpwssd zmm13, zmm25, zmm28",
                "vpbroadcastd zmm29, dword ptr [{d4} + {sd3} + 4]",
                "vpdpwssd zmm14, zmm24, zmm29",
                "vpdpwssd zmm15, zmm25, zmm29",
                "vpbroadcastd zmm26, dword ptr [{d8} + 4]",
                "vpdpwssd zmm16, zmm24, zmm26",
                "vpdpwssd zmm17, zmm25, zmm26",
                "vpbroadcastd zmm27, dword ptr [{d8} + {sd} + 4]",
                "vpdpwssd zmm18, zmm24, zmm27",
                "vpdpwssd zmm19, zmm25, zmm27",
                "vpbroadcastd zmm28, dword ptr [{d8} + 2*{sd} + 4]",
                "vpdpwssd zmm20, zmm24, zmm28",
                "vpdpwssd zmm21, zmm25, zmm28",
                "vpbroadcastd zmm29, dword ptr [{d8} + {sd3} + 4]",
                "vpdpwssd zmm22, zmm24, zmm29",
                "vpdpwssd zmm23, zmm25, zmm29",
                "add {q}, 256",
                "add {d}, {adv}",
                "add {d4}, {adv}",
                "add {d8}, {adv}",
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
                q = inout(reg) qp.as_ptr() => _,
                d = inout(reg) d.as_ptr() => _,
                d4 = inout(reg) d.as_ptr().add(4 * d_stride) => _,
                d8 = inout(reg) d.as_ptr().add(8 * d_stride) => _,
                sd = in(reg) sd,
                sd3 = in(reg) 3 * sd,
                adv = in(reg) couple * 2,
                n = inout(reg) couples => _,
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
    /// lanes (8 query rows here, against one database row's pair broadcast); `vpaddd`
    /// accumulates them. Assembly, to place the 16 registers exactly.
    ///
    /// # Safety
    /// The CPU must support `avx2`; `qp` must hold `pairs` steps of [`AVX2_P`] interleaved
    /// pairs, and `d` [`AVX2_D`] rows of at least `2 * pairs` elements starting `d_stride`
    /// elements apart.
    #[target_feature(enable = "avx2")]
    pub unsafe fn tile_avx2(
        qp: &[u16],
        d: &[u16],
        pairs: usize,
        d_stride: usize,
        acc: &mut Acc<AVX2_P, AVX2_D>,
    ) {
        const _: () = assert!(AVX2_P == 16 && AVX2_D == 6);
        if pairs == 0 {
            return;
        }
        let sd = d_stride * 2;
        // SAFETY: `acc` is 12 x 32 bytes, read and written back whole. Step k reads 64 bytes
        // of `qp` at 64 * k (inside its `pairs` steps) and 4 bytes at 4 * k of each database
        // row j (at byte j * sd, j < 6; `d4` starts at row 4): inside `d`. Unaligned loads
        // are allowed; the caller guarantees the feature.
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
                // The loop from a cache line on, so its speed does not depend on where the
                // linker places it.
                ".p2align 6",
                "2:",
                "vmovdqu ymm12, [{q}]",
                "vmovdqu ymm13, [{q} + 32]",
                "vpbroadcastd ymm14, dword ptr [{d}]",
                "vpmaddwd ymm15, ymm12, ymm14",
                "vpaddd ymm0, ymm0, ymm15",
                "vpmaddwd ymm15, ymm13, ymm14",
                "vpaddd ymm1, ymm1, ymm15",
                "vpbroadcastd ymm14, dword ptr [{d} + {sd}]",
                "vpmaddwd ymm15, ymm12, ymm14",
                "vpaddd ymm2, ymm2, ymm15",
                "vpmaddwd ymm15, ymm13, ymm14",
                "vpaddd ymm3, ymm3, ymm15",
                "vpbroadcastd ymm14, dword ptr [{d} + 2*{sd}]",
                "vpmaddwd ymm15, ymm12, ymm14",
                "vpaddd ymm4, ymm4, ymm15",
                "vpmaddwd ymm15, ymm13, ymm14",
                "vpaddd ymm5, ymm5, ymm15",
                "vpbroadcastd ymm14, dword ptr [{d} + {sd3}]",
                "vpmaddwd ymm15, ymm12, ymm14",
                "vpaddd ymm6, ymm6, ymm15",
                "vpmaddwd ymm15, ymm13, ymm14",
                "vpaddd ymm7, ymm7, ymm15",
                "vpbroadcastd ymm14, dword ptr [{d4}]",
                "vpmaddwd ymm15, ymm12, ymm14",
                "vpaddd ymm8, ymm8, ymm15",
                "vpmaddwd ymm15, ymm13, ymm14",
                "vpaddd ymm9, ymm9, ymm15",
                "vpbroadcastd ymm14, dword ptr [{d4} + {sd}]",
                "vpmaddwd ymm15, ymm12, ymm14",
                "vpaddd ymm10, ymm10, ymm15",
                "vpmaddwd ymm15, ymm13, ymm14",
                "vpaddd ymm11, ymm11, ymm15",
                "add {q}, 64",
                "add {d}, 4",
                "add {d4}, 4",
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
                q = inout(reg) qp.as_ptr() => _,
                d = inout(reg) d.as_ptr() => _,
                d4 = inout(reg) d.as_ptr().add(4 * d_stride) => _,
                sd = in(reg) sd,
                sd3 = in(reg) 3 * sd,
                n = inout(reg) pairs => _,
                out("ymm0") _, out("ymm1") _, out("ymm2") _, out("ymm3") _,
                out("ymm4") _, out("ymm5") _, out("ymm6") _, out("ymm7") _,
                out("ymm8") _, out("ymm9") _, out("ymm10") _, out("ymm11") _,
                out("ymm12") _, out("ymm13") _, out("ymm14") _, out("ymm15") _,
                options(nostack),
            );
        }
    }

    /// [`super::leaves_avx2`]: per step, the groups `g0..g3` (elements `z0..z3` of four
    /// consecutive groups) are transposed into `Z0..Z3`, each holding one element of every
    /// group, then summed.
    ///
    /// With `ALL` false, the leaves that are elements of `y` ([`super::DIRECT_LEAVES`]) are
    /// not written.
    ///
    /// # Safety
    /// The CPU must support `avx2`; `y` must hold `64 * steps` coefficients and `out` nine
    /// leaves of `16 * steps` at `stride`.
    #[target_feature(enable = "avx2")]
    pub unsafe fn leaves_avx2<const ALL: bool>(
        y: &[u16],
        out: &mut [u16],
        stride: usize,
        steps: usize,
    ) {
        use core::arch::x86_64::*;
        let src = y.as_ptr() as *const __m256i;
        let dst = out.as_mut_ptr();
        for i in 0..steps {
            // SAFETY: step `i` reads 128 bytes inside `y` and writes 32 bytes at
            // `16 * i` of each leaf, inside `out` (the caller's contract).
            unsafe {
                let g0 = _mm256_loadu_si256(src.add(4 * i));
                let g1 = _mm256_loadu_si256(src.add(4 * i + 1));
                let g2 = _mm256_loadu_si256(src.add(4 * i + 2));
                let g3 = _mm256_loadu_si256(src.add(4 * i + 3));
                let t0 = _mm256_unpacklo_epi64(g0, g1);
                let t1 = _mm256_unpackhi_epi64(g0, g1);
                let t2 = _mm256_unpacklo_epi64(g2, g3);
                let t3 = _mm256_unpackhi_epi64(g2, g3);
                let z0 = _mm256_permute2x128_si256::<0x20>(t0, t2);
                let z2 = _mm256_permute2x128_si256::<0x31>(t0, t2);
                let z1 = _mm256_permute2x128_si256::<0x20>(t1, t3);
                let z3 = _mm256_permute2x128_si256::<0x31>(t1, t3);
                let z01 = _mm256_add_epi16(z0, z1);
                let z23 = _mm256_add_epi16(z2, z3);
                let z13 = _mm256_add_epi16(z1, z3);
                let z02 = _mm256_add_epi16(z0, z2);
                let leaves = [
                    _mm256_add_epi16(z01, z23),
                    z23,
                    z01,
                    z13,
                    z3,
                    z1,
                    z02,
                    z2,
                    z0,
                ];
                for (s, v) in leaves.into_iter().enumerate() {
                    if ALL || DIRECT_LEAVES[s].is_none() {
                        _mm256_storeu_si256(dst.add(s * stride + 16 * i) as *mut __m256i, v);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ocelli_mpc::scratch::ScratchPool;
    use rand_chacha::ChaCha20Rng;
    use rand_core::{RngCore, SeedableRng};

    /// Every tile adds the wrapping dot products of its rows to non-zero accumulators, with
    /// database rows in place (stride above the length), in couples of every width the
    /// tile takes, with an odd last pair, and with the extreme value -32768 whose pair of
    /// products overflows i32. Query rows laid out for a tile that reads them in blocks of
    /// `block` coefficients ([`crate::Tile::query_block`]).
    fn check<const P: usize, const D: usize>(
        tile: impl Fn(&[u16], &[u16], usize, usize, &mut Acc<P, D>),
        couples: &[usize],
        block: usize,
    ) {
        let mut rng = ChaCha20Rng::seed_from_u64(7);
        let shapes = couples.iter().flat_map(|&c| [(128, c), (126, c)]);
        for (len, couple) in shapes {
            let pairs = len / 2;
            let span = pair_at(pairs - 1, couple) + 2;
            let stride = span + 72;
            let mut q: Vec<u16> = (0..P * len).map(|_| rng.next_u32() as u16).collect();
            let mut d: Vec<u16> = (0..(D - 1) * stride + span)
                .map(|_| rng.next_u32() as u16)
                .collect();
            q[..4].fill(0x8000);
            d[..4].fill(0x8000);
            let start = |i: usize, j: usize| (i * 31 + j * 7) as i32 - 50;
            let mut acc = [[0i32; P]; D];
            for (j, row) in acc.iter_mut().enumerate() {
                for (i, a) in row.iter_mut().enumerate() {
                    *a = start(i, j);
                }
            }
            let mut panel = crate::engine::interleave(&q, len, P, &ScratchPool::default());
            crate::engine::regroup(&mut panel, len, P, block);
            tile(&panel, &d, stride, couple, &mut acc);
            for (j, row) in acc.iter().enumerate() {
                for (i, &a) in row.iter().enumerate() {
                    let expected = (0..len).fold(start(i, j), |s, k| {
                        let at = j * stride + pair_at(k / 2, couple) + k % 2;
                        s.wrapping_add(i32::from(q[i * len + k] as i16) * i32::from(d[at] as i16))
                    });
                    assert_eq!(a, expected, "query {i} database {j}, {len} by {couple}");
                }
            }
        }
    }

    #[test]
    fn every_tile_adds_the_dot_products_of_its_rows() {
        let couples = [CONTIGUOUS, crate::correlate::DIRECT_COUPLE];
        check::<SCALAR_P, SCALAR_D>(tile_scalar, &couples, 2);
        if let Some(cpu) = Avx512Vnni::detect() {
            check(
                |q, d, s, c, acc| tile_avx512_vnni(cpu, q, d, s, c, acc),
                &couples,
                2,
            );
        }
        if let Some(cpu) = Avx2::detect() {
            check(
                |q, d, s, _, acc| tile_avx2(cpu, q, d, s, acc),
                &[CONTIGUOUS],
                2,
            );
        }
    }

    /// Every tile shape the tuner tries ([`crate::Tile::candidates`]), hand-placed or
    /// generic, in every couple width it takes.
    #[test]
    fn every_candidate_tile_adds_the_dot_products_of_its_rows() {
        for kernel in crate::Kernel::all_supported() {
            for tile in crate::Tile::candidates(kernel) {
                macro_rules! go {
                    ($p:literal, $d:literal, $tile:expr, $in_place:expr) => {{
                        let couples: &[usize] = if $in_place {
                            &[CONTIGUOUS, crate::correlate::DIRECT_COUPLE]
                        } else {
                            &[CONTIGUOUS]
                        };
                        check::<$p, $d>($tile, couples, tile.query_block())
                    }};
                }
                crate::tile::dispatch!(tile, go);
            }
        }
    }
}
