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
    if let Some(planes) = ocelli_simd::planes::to_planes_u32(values, k) {
        return planes;
    }
    to_planes(values, k)
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
