//! The share layout: which plain bit each ring coefficient holds.
//!
//! Coefficient `i` (0..12,800) holds plain bit
//! `800 r + 4 c + 2 w + b` with `b = i / 6400`, `w = (i % 6400) / 3200`, `r1 = (i % 3200) / 800`,
//! `c = (i % 800) / 4`, `r2 = i % 4`, `r = 4 r2 + r1`. Four consecutive coefficients form one
//! ring element holding rows `r1, r1+4, r1+8, r1+12` of one column, and every 800-coefficient
//! chunk (200 elements) is one (part, wavelet, r1) slice over all columns, so rotating the
//! query by `k` columns rotates each chunk by `k` whole elements.

use crate::{CODE_COEFS, COLUMNS};

/// Ring elements in a code share.
pub const CODE_ELEMENTS: usize = CODE_COEFS / 4;
/// Ring elements in a trimmed mask share.
pub const MASK_ELEMENTS: usize = crate::MASK_COEFS / 4;
/// Ring elements per rotation chunk: one per column.
pub const CHUNK_ELEMENTS: usize = COLUMNS;

/// Plain bits between consecutive coefficients of one ring element (four rows).
pub const ELEMENT_BIT_STRIDE: usize = 3200;

/// The plain bit held by coefficient 0 of ring element `element`; its coefficient `k` holds
/// bit `element_bit_base(element) + k * ELEMENT_BIT_STRIDE`.
///
/// # Panics
/// If `element >= 3_200`.
pub const fn element_bit_base(element: usize) -> usize {
    plain_bit_index(4 * element)
}

/// The plain bit index held by ring coefficient `coef`.
///
/// # Panics
/// If `coef >= 12_800`.
pub const fn plain_bit_index(coef: usize) -> usize {
    assert!(coef < CODE_COEFS);
    let b = coef / 6400;
    let w = (coef % 6400) / 3200;
    let r1 = (coef % 3200) / 800;
    let c = (coef % 800) / 4;
    let r2 = coef % 4;
    let r = 4 * r2 + r1;
    800 * r + 4 * c + 2 * w + b
}

/// The permutation as a table, computed at compile time.
pub static PLAIN_BIT_INDEX: [u16; CODE_COEFS] = {
    let mut table = [0u16; CODE_COEFS];
    let mut i = 0;
    while i < CODE_COEFS {
        table[i] = plain_bit_index(i) as u16;
        i += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_a_permutation() {
        let mut seen = [false; CODE_COEFS];
        for &p in PLAIN_BIT_INDEX.iter() {
            assert!(!seen[p as usize]);
            seen[p as usize] = true;
        }
    }

    #[test]
    fn the_trimmed_half_holds_exactly_the_real_parts() {
        for (i, &bit) in PLAIN_BIT_INDEX.iter().enumerate() {
            let part = bit % 2;
            assert_eq!(part == 0, i < crate::MASK_COEFS);
        }
    }

    #[test]
    fn an_elements_coefficients_are_one_stride_apart() {
        for e in 0..CODE_ELEMENTS {
            for k in 0..4 {
                let bit = element_bit_base(e) + k * ELEMENT_BIT_STRIDE;
                assert_eq!(bit, plain_bit_index(4 * e + k));
            }
        }
    }

    #[test]
    fn an_element_holds_rows_r1_plus_multiples_of_four_of_one_column() {
        for e in 0..CODE_ELEMENTS {
            let bits: [usize; 4] = core::array::from_fn(|k| plain_bit_index(4 * e + k));
            let rows = bits.map(|b| b / 800);
            let cols = bits.map(|b| (b % 800) / 4);
            assert!(cols.iter().all(|&c| c == cols[0]));
            assert_eq!(rows, [rows[0], rows[0] + 4, rows[0] + 8, rows[0] + 12]);
            assert_eq!(cols[0], e % CHUNK_ELEMENTS);
        }
    }
}
