//! ChaCha12 keystream blocks side by side in vector registers: word `i` of 16 (AVX-512) or 8
//! (AVX2) consecutive blocks in one register. The words are those of rand_chacha's
//! `ChaCha12Rng` (key from the seed's little-endian words, stream 0, a 64-bit block counter in
//! words 12 and 13); the protocol crate's tests hold every version to the generator itself.

/// Bytes of one block.
pub const BLOCK_BYTES: usize = 64;

/// The "expand 32-byte k" constant, words 0 to 3 of every block.
const CONSTANTS: [u32; 4] = [0x6170_7865, 0x3320_646e, 0x7962_2d32, 0x6b20_6574];

/// The sixteen input words of block `block` under `key`.
pub fn block_input(key: &[u32; 8], block: u64) -> [u32; 16] {
    let mut s = [0u32; 16];
    s[..4].copy_from_slice(&CONSTANTS);
    s[4..12].copy_from_slice(key);
    s[12] = block as u32;
    s[13] = (block >> 32) as u32;
    s
}

/// Writes blocks `first..` of the stream under `key` into the front of `out`, 16 blocks per
/// step, as many whole steps as fit; returns the bytes written, or `None` if this CPU lacks
/// AVX-512F.
pub fn fill_avx512(key: &[u32; 8], first: u64, out: &mut [u8]) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: AVX-512F was detected just above.
        return Some(unsafe { x86::fill_avx512(key, first, out) });
    }
    let _ = (key, first, out);
    None
}

/// [`fill_avx512`] with AVX2, 8 blocks per step; `None` if this CPU lacks AVX2.
pub fn fill_avx2(key: &[u32; 8], first: u64, out: &mut [u8]) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was detected just above.
        return Some(unsafe { x86::fill_avx2(key, first, out) });
    }
    let _ = (key, first, out);
    None
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::x86_64::*;

    use super::{block_input, BLOCK_BYTES};

    /// Block counters of `LANES` consecutive blocks from `first`: low words, then high words.
    fn counters<const LANES: usize>(first: u64) -> ([u32; LANES], [u32; LANES]) {
        let block = |lane: usize| first.wrapping_add(lane as u64);
        (
            core::array::from_fn(|lane| block(lane) as u32),
            core::array::from_fn(|lane| (block(lane) >> 32) as u32),
        )
    }

    /// Rows 0 to 3, 4 to 7, ... interleaved so that 128-bit lane `l` of output `4 * g + j`
    /// holds word `4 * l + j` of rows `4 * g..4 * g + 4`: the first two steps of a transpose.
    macro_rules! interleave_fours {
        ($r:ident, $lo32:ident, $hi32:ident, $lo64:ident, $hi64:ident) => {{
            let t: [_; 16] = core::array::from_fn(|i| {
                let (a, b) = ($r[i & !1], $r[i | 1]);
                if i % 2 == 0 {
                    $lo32(a, b)
                } else {
                    $hi32(a, b)
                }
            });
            let u: [_; 16] = core::array::from_fn(|i| {
                let (g, j) = (i / 4 * 4, i % 4);
                let (a, b) = (t[g + j / 2], t[g + j / 2 + 2]);
                if j % 2 == 0 {
                    $lo64(a, b)
                } else {
                    $hi64(a, b)
                }
            });
            u
        }};
    }

    /// Sixteen rows of sixteen words to sixteen columns: the blocks, word `w` of block `b`
    /// being lane `b` of row `w`.
    #[target_feature(enable = "avx512f")]
    fn transpose_avx512(rows: &[__m512i; 16]) -> [__m512i; 16] {
        let u = interleave_fours!(
            rows,
            _mm512_unpacklo_epi32,
            _mm512_unpackhi_epi32,
            _mm512_unpacklo_epi64,
            _mm512_unpackhi_epi64
        );
        let mut out = [_mm512_setzero_si512(); 16];
        for j in 0..4 {
            // Lanes 0 and 1, then 2 and 3, of rows 0..8 and of rows 8..16.
            let front = _mm512_shuffle_i32x4::<0x44>(u[j], u[4 + j]);
            let back = _mm512_shuffle_i32x4::<0xEE>(u[j], u[4 + j]);
            let front_high = _mm512_shuffle_i32x4::<0x44>(u[8 + j], u[12 + j]);
            let back_high = _mm512_shuffle_i32x4::<0xEE>(u[8 + j], u[12 + j]);
            out[j] = _mm512_shuffle_i32x4::<0x88>(front, front_high);
            out[4 + j] = _mm512_shuffle_i32x4::<0xDD>(front, front_high);
            out[8 + j] = _mm512_shuffle_i32x4::<0x88>(back, back_high);
            out[12 + j] = _mm512_shuffle_i32x4::<0xDD>(back, back_high);
        }
        out
    }

    /// Sixteen rows of eight words to eight blocks of two halves, word `w` of block `b` being
    /// lane `b` of row `w`.
    #[target_feature(enable = "avx2")]
    fn transpose_avx2(rows: &[__m256i; 16]) -> [[__m256i; 2]; 8] {
        let u = interleave_fours!(
            rows,
            _mm256_unpacklo_epi32,
            _mm256_unpackhi_epi32,
            _mm256_unpacklo_epi64,
            _mm256_unpackhi_epi64
        );
        let mut out = [[_mm256_setzero_si256(); 2]; 8];
        for j in 0..4 {
            out[j] = [
                _mm256_permute2x128_si256::<0x20>(u[j], u[4 + j]),
                _mm256_permute2x128_si256::<0x20>(u[8 + j], u[12 + j]),
            ];
            out[4 + j] = [
                _mm256_permute2x128_si256::<0x31>(u[j], u[4 + j]),
                _mm256_permute2x128_si256::<0x31>(u[8 + j], u[12 + j]),
            ];
        }
        out
    }

    /// Six double rounds on the state `x` (an array of sixteen vectors), written out with
    /// literal indices so that the state stays in registers.
    macro_rules! double_rounds {
        ($x:ident, $add:ident, $xor:ident, $rot16:expr, $rot12:expr, $rot8:expr, $rot7:expr) => {
            macro_rules! quarter {
                ($a:literal, $b:literal, $c:literal, $d:literal) => {
                    $x[$a] = $add($x[$a], $x[$b]);
                    $x[$d] = $rot16($xor($x[$d], $x[$a]));
                    $x[$c] = $add($x[$c], $x[$d]);
                    $x[$b] = $rot12($xor($x[$b], $x[$c]));
                    $x[$a] = $add($x[$a], $x[$b]);
                    $x[$d] = $rot8($xor($x[$d], $x[$a]));
                    $x[$c] = $add($x[$c], $x[$d]);
                    $x[$b] = $rot7($xor($x[$b], $x[$c]));
                };
            }
            for _ in 0..6 {
                quarter!(0, 4, 8, 12);
                quarter!(1, 5, 9, 13);
                quarter!(2, 6, 10, 14);
                quarter!(3, 7, 11, 15);
                quarter!(0, 5, 10, 15);
                quarter!(1, 6, 11, 12);
                quarter!(2, 7, 8, 13);
                quarter!(3, 4, 9, 14);
            }
        };
    }

    /// The steps of a vector version: `$lanes` blocks per step, word `w` of each in lane
    /// order in one `$vec` register, written out by `$store`; evaluates to the bytes written.
    macro_rules! fill_steps {
        (
            $key:ident, $first:ident, $out:ident, $lanes:expr, $vec:ty, $load:ident, $set1:ident,
            $add:ident, $xor:ident, [$rot16:expr, $rot12:expr, $rot8:expr, $rot7:expr], $store:ident
        ) => {{
            let steps = $out.len() / ($lanes * BLOCK_BYTES);
            let input = zeroize::Zeroizing::new(block_input($key, 0));
            for (step, chunk) in $out
                .chunks_exact_mut($lanes * BLOCK_BYTES)
                .take(steps)
                .enumerate()
            {
                let first = $first.wrapping_add((step * $lanes) as u64);
                let (low, high) = counters::<$lanes>(first);
                let s: [$vec; 16] = core::array::from_fn(|w| match w {
                    // SAFETY (both loads): `$lanes` u32 are one unaligned register load.
                    12 => unsafe { $load(low.as_ptr().cast()) },
                    13 => unsafe { $load(high.as_ptr().cast()) },
                    _ => $set1(input[w] as i32),
                });
                let mut x = s;
                double_rounds!(x, $add, $xor, $rot16, $rot12, $rot8, $rot7);
                $store(&core::array::from_fn(|w| $add(x[w], s[w])), chunk);
            }
            steps * $lanes * BLOCK_BYTES
        }};
    }

    /// Sixteen blocks per step in `zmm` registers.
    ///
    /// # Safety
    /// The CPU must support `avx512f`.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn fill_avx512(key: &[u32; 8], first: u64, out: &mut [u8]) -> usize {
        fill_steps!(
            key,
            first,
            out,
            16,
            __m512i,
            _mm512_loadu_si512,
            _mm512_set1_epi32,
            _mm512_add_epi32,
            _mm512_xor_si512,
            [
                _mm512_rol_epi32::<16>,
                _mm512_rol_epi32::<12>,
                _mm512_rol_epi32::<8>,
                _mm512_rol_epi32::<7>
            ],
            store_avx512
        )
    }

    /// A step's sixteen rows (word `w` of block `b` in lane `b` of row `w`) as sixteen blocks.
    #[target_feature(enable = "avx512f")]
    fn store_avx512(rows: &[__m512i; 16], chunk: &mut [u8]) {
        assert!(chunk.len() >= 16 * BLOCK_BYTES, "room for sixteen blocks");
        for (b, block) in transpose_avx512(rows).iter().enumerate() {
            // SAFETY: block `b` of the sixteen in `chunk`, one unaligned 512-bit store.
            unsafe { _mm512_storeu_si512(chunk[b * BLOCK_BYTES..].as_mut_ptr().cast(), *block) };
        }
    }

    #[target_feature(enable = "avx2")]
    fn rot16_avx2(v: __m256i) -> __m256i {
        let bytes = _mm256_setr_epi8(
            2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11,
            8, 9, 14, 15, 12, 13,
        );
        _mm256_shuffle_epi8(v, bytes)
    }

    #[target_feature(enable = "avx2")]
    fn rot8_avx2(v: __m256i) -> __m256i {
        let bytes = _mm256_setr_epi8(
            3, 0, 1, 2, 7, 4, 5, 6, 11, 8, 9, 10, 15, 12, 13, 14, 3, 0, 1, 2, 7, 4, 5, 6, 11, 8, 9,
            10, 15, 12, 13, 14,
        );
        _mm256_shuffle_epi8(v, bytes)
    }

    #[target_feature(enable = "avx2")]
    fn rot12_avx2(v: __m256i) -> __m256i {
        _mm256_or_si256(_mm256_slli_epi32::<12>(v), _mm256_srli_epi32::<20>(v))
    }

    #[target_feature(enable = "avx2")]
    fn rot7_avx2(v: __m256i) -> __m256i {
        _mm256_or_si256(_mm256_slli_epi32::<7>(v), _mm256_srli_epi32::<25>(v))
    }

    /// Eight blocks per step in `ymm` registers.
    ///
    /// # Safety
    /// The CPU must support `avx2`.
    #[target_feature(enable = "avx2")]
    pub unsafe fn fill_avx2(key: &[u32; 8], first: u64, out: &mut [u8]) -> usize {
        fill_steps!(
            key,
            first,
            out,
            8,
            __m256i,
            _mm256_loadu_si256,
            _mm256_set1_epi32,
            _mm256_add_epi32,
            _mm256_xor_si256,
            [rot16_avx2, rot12_avx2, rot8_avx2, rot7_avx2],
            store_avx2
        )
    }

    /// A step's sixteen rows (word `w` of block `b` in lane `b` of row `w`) as eight blocks.
    #[target_feature(enable = "avx2")]
    fn store_avx2(rows: &[__m256i; 16], chunk: &mut [u8]) {
        assert!(chunk.len() >= 8 * BLOCK_BYTES, "room for eight blocks");
        for (b, halves) in transpose_avx2(rows).iter().enumerate() {
            for (h, half) in halves.iter().enumerate() {
                // SAFETY: half `h` of block `b` of the eight in `chunk`, one unaligned 256-bit
                // store.
                unsafe {
                    _mm256_storeu_si256(
                        chunk[b * BLOCK_BYTES + h * 32..].as_mut_ptr().cast(),
                        *half,
                    )
                };
            }
        }
    }
}
