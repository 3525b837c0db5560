//! The mirrored capture, for mirror-attack detection: what a template becomes when the iris
//! image is flipped left to right.
//!
//! On the (16, 200, 2, 2) array: the 200 columns reversed within each half (column `c` becomes
//! `99 - c` for `c < 100`, `299 - c` otherwise), rows, wavelets and parts unchanged, and the
//! imaginary code bit of every pair inverted. For a usable bit the masked value
//! `v = m - 2 (c AND m)` then becomes `-v`; a masked bit stays 0. At the person level the eyes
//! are swapped as well (a mirrored left eye looks like a right eye).
//!
//! On shares the same map is local: every ring element holds one column of one
//! (part, wavelet, r1) slice ([`crate::layout`]), so the column reversal permutes whole ring
//! elements, and the imaginary half (coefficients 6,400..12,800) is made of whole elements,
//! whose plain values are all negated: `S (-a) = -(S a)` and a degree-1 sharing
//! `s + r alpha` of `s` negated is a sharing of `-s`. So each party negates its elements, with
//! no communication.

use crate::shamir::{CodeShare, EyeShares, MaskShare, PartyShares};
use crate::template::{IrisBits, IrisTemplate};
use crate::{BITS_PER_COLUMN, CODE_BITS, COLUMNS, MASK_COEFS};

/// Columns in each half of a row; the reversal stays within a half.
pub const HALF_COLUMNS: usize = COLUMNS / 2;

/// Where column `c` goes: `99 - c` in the first half, `299 - c` in the second.
///
/// # Panics
/// In debug builds, if `c >= 200`.
pub const fn mirror_column(c: usize) -> usize {
    debug_assert!(c < COLUMNS);
    if c < HALF_COLUMNS {
        HALF_COLUMNS - 1 - c
    } else {
        COLUMNS + HALF_COLUMNS - 1 - c
    }
}

/// Plain bits with the columns reversed within each half; with `invert_imaginary`, every
/// imaginary bit (part 1) inverted too (for codes, not masks).
pub fn mirror_bits(bits: &IrisBits, invert_imaginary: bool) -> IrisBits {
    const ROW_BITS: usize = COLUMNS * BITS_PER_COLUMN;
    let mut out = IrisBits::zero();
    for i in 0..CODE_BITS {
        let (row, within) = (i / ROW_BITS, i % ROW_BITS);
        let (col, sub) = (within / BITS_PER_COLUMN, within % BITS_PER_COLUMN);
        let dst = row * ROW_BITS + mirror_column(col) * BITS_PER_COLUMN + sub;
        let imaginary = sub % 2 == 1;
        out.set(dst, bits.get(i) ^ (invert_imaginary && imaginary));
    }
    out
}

impl IrisTemplate {
    /// The template of the mirrored image: columns reversed within each half, imaginary code
    /// bits inverted, mask permuted alike. Mirroring preserves validity.
    pub fn mirrored(&self) -> IrisTemplate {
        IrisTemplate {
            code: mirror_bits(&self.code, true),
            mask: mirror_bits(&self.mask, false),
            version: self.version.clone(),
        }
    }
}

/// Coefficients (share or plain values) in the packed layout mirrored: element `e` of each
/// 200-element chunk moves to `mirror_column(e)`, and with `negate_imaginary` the elements of
/// the imaginary half (coefficients from 6,400) are negated. `src` and `dst` have the same
/// length, a multiple of 800.
///
/// # Panics
/// If the lengths differ or are not a multiple of 800.
pub fn mirror_coefs(src: &[u16], negate_imaginary: bool, dst: &mut [u16]) {
    const CHUNK: usize = COLUMNS * 4;
    assert_eq!(src.len(), dst.len());
    assert_eq!(src.len() % CHUNK, 0);
    for (ci, (s, d)) in src
        .chunks_exact(CHUNK)
        .zip(dst.chunks_exact_mut(CHUNK))
        .enumerate()
    {
        let negate = negate_imaginary && ci * CHUNK >= MASK_COEFS;
        for col in 0..COLUMNS {
            let to = mirror_column(col) * 4;
            for k in 0..4 {
                let v = s[col * 4 + k];
                d[to + k] = if negate { v.wrapping_neg() } else { v };
            }
        }
    }
}

/// One eye's shares mirrored (code: permuted, imaginary half negated; mask: permuted).
pub fn mirror_eye(eye: &EyeShares) -> EyeShares {
    let mut out = EyeShares {
        code: CodeShare::zero(),
        mask: MaskShare::zero(),
    };
    mirror_coefs(eye.code.coefs(), true, out.code.coefs_mut());
    mirror_coefs(eye.mask.coefs(), false, out.mask.coefs_mut());
    out
}

/// A person's shares as the mirrored capture would carry them: each eye mirrored, and the
/// eyes swapped.
pub fn mirror_person(shares: &PartyShares) -> PartyShares {
    PartyShares {
        left: mirror_eye(&shares.right),
        right: mirror_eye(&shares.left),
    }
}

#[cfg(test)]
mod tests;
