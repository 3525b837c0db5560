//! The 31 rotations k = -15..=15: each 800-bit row shifted cyclically by k columns, as
//! `numpy.roll(code, k, axis=1)` on the (16, 200, 4) view. Only queries are rotated.
//!
//! The same rotation acts on plain bits ([`rotate_bits`]) and on share coefficients in the
//! packed layout ([`rotate_coefs`]), where it permutes whole ring elements.

use crate::template::IrisBits;
use crate::COLUMNS;

/// Largest rotation in columns, either way.
pub const MAX_ROTATION: i32 = 15;
/// Number of rotations, 2 * 15 + 1.
pub const ROTATION_COUNT: usize = 2 * MAX_ROTATION as usize + 1;
/// Coefficients per rotation chunk in the share layout (200 ring elements).
pub const CHUNK_COEFS: usize = COLUMNS * 4;

/// The rotations in index order: index `k + 15` holds rotation `k`.
pub fn rotations() -> core::ops::RangeInclusive<i32> {
    -MAX_ROTATION..=MAX_ROTATION
}

/// Plain bits rotated by `k` columns (any `k`; taken mod 200): [`IrisBits::rotated`].
pub fn rotate_bits(bits: &IrisBits, k: i32) -> IrisBits {
    bits.rotated(k)
}

/// Share (or plain) coefficients in the packed layout rotated by `k` columns: each
/// 800-coefficient chunk rotates by `4 k`. `src` and `dst` have the same length, a multiple
/// of 800 (a code share, a trimmed mask share or a preprocessed query).
///
/// # Panics
/// If the lengths differ or are not a multiple of 800.
pub fn rotate_coefs<T: Copy>(src: &[T], k: i32, dst: &mut [T]) {
    assert_eq!(src.len(), dst.len());
    assert_eq!(src.len() % CHUNK_COEFS, 0);
    let shift = (k.rem_euclid(COLUMNS as i32) as usize) * 4;
    for (s, d) in src
        .chunks_exact(CHUNK_COEFS)
        .zip(dst.chunks_exact_mut(CHUNK_COEFS))
    {
        // dst[p] = src[p - shift]
        d[shift..].copy_from_slice(&s[..CHUNK_COEFS - shift]);
        d[..shift].copy_from_slice(&s[CHUNK_COEFS - shift..]);
    }
}
