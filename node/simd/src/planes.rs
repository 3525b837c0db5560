//! Bit-plane transposition of u32 values with AVX2: every 64 values regrouped into their four
//! byte planes and each bit plane read with one `vpmovmskb` per 32 values, instead of a
//! 64 x 64 transpose half of zeros.

/// The first `k` bit planes of `values` (`k <= 32`): plane `j` at words `j * w..(j + 1) * w`
/// with `w = ceil(len / 64)`, bit `i` of a plane from value `i`; `None` without AVX2.
pub fn to_planes_u32(values: &[u32], k: usize) -> Option<Vec<u64>> {
    assert!(k <= 32, "at most 32 planes of u32 values");
    #[cfg(target_arch = "x86_64")]
    return x86::to_planes_u32(values, k);
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (values, k);
        None
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::x86_64::*;

    pub fn to_planes_u32(values: &[u32], k: usize) -> Option<Vec<u64>> {
        if !std::arch::is_x86_feature_detected!("avx2") {
            return None;
        }
        let w = values.len().div_ceil(64);
        let mut planes = vec![0u64; k * w];
        let mut chunk_planes = [0u64; 32];
        for (c, chunk) in values.chunks(64).enumerate() {
            let mut block = [0u32; 64];
            block[..chunk.len()].copy_from_slice(chunk);
            // SAFETY: AVX2 was detected above.
            unsafe { planes_of_64(&block, &mut chunk_planes) };
            for (j, &word) in chunk_planes.iter().take(k).enumerate() {
                planes[j * w + c] = word;
            }
        }
        Some(planes)
    }

    /// `out[j]` holds bit `j` of `values[i]` at bit `i`.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub unsafe fn planes_of_64(values: &[u32; 64], out: &mut [u64; 32]) {
        // In each 128-bit lane, byte 0 of its four values, then byte 1, 2 and 3; then byte
        // `k` of all eight values as 64-bit word `k`.
        #[rustfmt::skip]
        let group = _mm256_setr_epi8(
            0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
            0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
        );
        let pair = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        // `bytes[h][k]`: byte `k` of values `32 h .. 32 h + 32`, one per byte lane.
        let mut bytes = [[_mm256_setzero_si256(); 4]; 2];
        for (h, half) in bytes.iter_mut().enumerate() {
            let mut r = [_mm256_setzero_si256(); 4];
            for (i, reg) in r.iter_mut().enumerate() {
                // SAFETY: values 32 h + 8 i .. + 8 lie inside the 64; unaligned load.
                let v = unsafe { _mm256_loadu_si256(values.as_ptr().add(32 * h + 8 * i).cast()) };
                *reg = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(v, group), pair);
            }
            let t0 = _mm256_unpacklo_epi64(r[0], r[1]);
            let t1 = _mm256_unpackhi_epi64(r[0], r[1]);
            let t2 = _mm256_unpacklo_epi64(r[2], r[3]);
            let t3 = _mm256_unpackhi_epi64(r[2], r[3]);
            *half = [
                _mm256_permute2x128_si256(t0, t2, 0x20),
                _mm256_permute2x128_si256(t1, t3, 0x20),
                _mm256_permute2x128_si256(t0, t2, 0x31),
                _mm256_permute2x128_si256(t1, t3, 0x31),
            ];
        }
        for k in 0..4 {
            let (mut lo, mut hi) = (bytes[0][k], bytes[1][k]);
            // A byte's top bit first, then each lower one shifted up into its place.
            for b in (0..8).rev() {
                let l = _mm256_movemask_epi8(lo) as u32;
                let h = _mm256_movemask_epi8(hi) as u32;
                out[8 * k + b] = u64::from(l) | (u64::from(h) << 32);
                lo = _mm256_add_epi8(lo, lo);
                hi = _mm256_add_epi8(hi, hi);
            }
        }
    }
}
