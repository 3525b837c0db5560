//! Bit slicing: `k`-bit values of `n` elements as `k` planes of `words_for(n)` u64 words,
//! plane `j` holding bit `j` of every element (element `e` at word `e / 64`, bit `e % 64`).

/// Words per plane for `n` elements.
pub const fn words_for(n: usize) -> usize {
    n.div_ceil(64)
}

/// The low `k` bits of each value as `k` consecutive planes.
pub fn to_planes<T: Copy + Into<u64>>(values: &[T], k: usize) -> Vec<u64> {
    let w = words_for(values.len());
    let mut planes = vec![0u64; k * w];
    for (chunk_index, chunk) in values.chunks(64).enumerate() {
        for j in 0..k {
            let mut word = 0u64;
            for (t, &v) in chunk.iter().enumerate() {
                word |= ((v.into() >> j) & 1) << t;
            }
            planes[j * w + chunk_index] = word;
        }
    }
    planes
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
        assert_eq!(ones(65), vec![u64::MAX, 1]);
        assert_eq!(ones(128), vec![u64::MAX, u64::MAX]);
    }
}
