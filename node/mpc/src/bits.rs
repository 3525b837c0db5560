//! Bit slicing: `k`-bit values of `n` elements as `k` planes of `words_for(n)` u64 words,
//! plane `j` holding bit `j` of every element (element `e` at word `e / 64`, bit `e % 64`).

/// Words per plane for `n` elements.
pub const fn words_for(n: usize) -> usize {
    n.div_ceil(64)
}

/// The low `k` bits of each value as `k` consecutive planes (`k <= 64`).
///
/// # Panics
/// If `k > 64`.
pub fn to_planes<T: Copy + Into<u64>>(values: &[T], k: usize) -> Vec<u64> {
    assert!(k <= 64, "at most 64 planes");
    let w = words_for(values.len());
    let mut planes = vec![0u64; k * w];
    let mut block = [0u64; 64];
    for (chunk_index, chunk) in values.chunks(64).enumerate() {
        block.fill(0);
        for (row, &v) in block.iter_mut().zip(chunk) {
            *row = v.into();
        }
        transpose64(&mut block);
        for (j, &plane_word) in block.iter().take(k).enumerate() {
            planes[j * w + chunk_index] = plane_word;
        }
    }
    planes
}

/// [`to_planes`] for u32 values (`k <= 32`), what the comparison phase slices: with AVX2,
/// every 64 values are regrouped into their four byte planes and each bit plane is read
/// with one `vpmovmskb` per 32 values, instead of a 64 x 64 transpose half of zeros.
///
/// # Panics
/// If `k > 32`.
pub fn to_planes_u32(values: &[u32], k: usize) -> Vec<u64> {
    assert!(k <= 32, "at most 32 planes of u32 values");
    #[cfg(target_arch = "x86_64")]
    if let Some(planes) = x86::to_planes_u32(values, k) {
        return planes;
    }
    to_planes(values, k)
}

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod x86 {
    use super::words_for;
    use core::arch::x86_64::*;

    /// [`super::to_planes_u32`] with AVX2; `None` without it.
    pub fn to_planes_u32(values: &[u32], k: usize) -> Option<Vec<u64>> {
        if !std::arch::is_x86_feature_detected!("avx2") {
            return None;
        }
        let w = words_for(values.len());
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

/// Transposes a 64 x 64 bit matrix in place: afterwards bit `i` of word `j` is what bit `j`
/// of word `i` was. Six rounds of swapping the off-diagonal blocks, halving the block size
/// each time, instead of 4,096 single-bit moves.
fn transpose64(a: &mut [u64; 64]) {
    let mut j = 32;
    let mut m: u64 = 0x0000_0000_FFFF_FFFF;
    while j != 0 {
        let mut k = 0;
        while k < 64 {
            let t = ((a[k] >> j) ^ a[k + j]) & m;
            a[k] ^= t << j;
            a[k + j] ^= t;
            k = (k + j + 1) & !j;
        }
        j >>= 1;
        m ^= m << j;
    }
}

/// The bits of one plane as 0/1 values, `n` of them.
pub fn plane_to_bits(plane: &[u64], n: usize) -> Vec<bool> {
    (0..n)
        .map(|e| (plane[e / 64] >> (e % 64)) & 1 == 1)
        .collect()
}

/// A plane with the first `n` bits set: the public constant 1 for `n` elements.
pub fn ones(n: usize) -> Vec<u64> {
    let mut plane = vec![u64::MAX; words_for(n)];
    if !n.is_multiple_of(64) {
        if let Some(last) = plane.last_mut() {
            *last = (1u64 << (n % 64)) - 1;
        }
    }
    plane
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planes_hold_the_bits_of_every_element() {
        let values: Vec<u32> = (0..150u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
        let planes = to_planes(&values, 32);
        let w = words_for(values.len());
        for j in 0..32 {
            let bits = plane_to_bits(&planes[j * w..(j + 1) * w], values.len());
            for (e, &b) in bits.iter().enumerate() {
                assert_eq!(b, (values[e] >> j) & 1 == 1);
            }
        }
        let wide: Vec<u64> = (0..70u64)
            .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .collect();
        let planes = to_planes(&wide, 64);
        let w = words_for(wide.len());
        for j in 0..64 {
            let bits = plane_to_bits(&planes[j * w..(j + 1) * w], wide.len());
            for (e, &b) in bits.iter().enumerate() {
                assert_eq!(b, (wide[e] >> j) & 1 == 1, "value {e} bit {j}");
            }
        }
        for n in [0, 1, 63, 64, 65, 150, 1_000] {
            let values: Vec<u32> = (0..n as u32)
                .map(|i| i.wrapping_mul(2_654_435_761))
                .collect();
            for k in [1, 17, 32] {
                assert_eq!(
                    to_planes_u32(&values, k),
                    to_planes(&values, k),
                    "{n} values, {k}"
                );
            }
        }
        assert_eq!(ones(65), vec![u64::MAX, 1]);
        assert_eq!(ones(128), vec![u64::MAX, u64::MAX]);
    }
}
