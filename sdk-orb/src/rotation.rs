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
    rotate_elements(src, COLUMNS, k, dst);
}

/// `src` in cycles of `elements` ring elements (four coefficients each), each cycle rotated
/// by `k` elements (any `k`; taken mod `elements`): `dst[e] = src[e - k]` within a cycle.
/// [`rotate_coefs`] is the cycle of a chunk; the node's correlation of rotations rotates
/// shorter cycles.
///
/// # Panics
/// If the lengths differ or are not a whole number of cycles.
pub fn rotate_elements<T: Copy>(src: &[T], elements: usize, k: i32, dst: &mut [T]) {
    let width = elements * 4;
    assert_eq!(src.len(), dst.len());
    assert!(width > 0 && src.len().is_multiple_of(width), "whole cycles");
    let shift = (k.rem_euclid(elements as i32) as usize) * 4;
    for (s, d) in src.chunks_exact(width).zip(dst.chunks_exact_mut(width)) {
        d[shift..].copy_from_slice(&s[..width - shift]);
        d[..shift].copy_from_slice(&s[width - shift..]);
    }
}
