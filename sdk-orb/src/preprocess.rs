//! Node-side query preprocessing and the party-local dot product.
//!
//! Party `id` multiplies each element of its query share by the degree-2 Lagrange
//! coefficient at zero `lambda_{id+1}` and converts it to basis B (`M * coefs`). Then
//! `sum_i db_coef_i * query_coef_i` (mod 2^16) over a code share is the party's additive share
//! of `cd`; over a trimmed mask share, of `md / 2`. The three additive shares sum to the
//! plaintext values.

use crate::ring::GaloisRingElement;
use crate::shamir::{secret_coefs, CodeShare, MaskShare};
use crate::{PartyId, CODE_COEFS, MASK_COEFS, PARTIES};

/// Degree-2 Lagrange coefficients at zero for the points (1, x, 1 + x).
pub const LAGRANGE_AT_ZERO: [GaloisRingElement; PARTIES] = [
    GaloisRingElement([1, 2, 2, 2]),
    GaloisRingElement([0xFFFF, 0xFFFE, 0xFFFE, 0xFFFE]),
    GaloisRingElement([1, 0, 0, 0]),
];

secret_coefs!(
    /// A party's preprocessed query code share, ready for dot products.
    PreprocessedCode,
    CODE_COEFS
);
secret_coefs!(
    /// A party's preprocessed trimmed query mask share.
    PreprocessedMask,
    MASK_COEFS
);

/// Preprocesses share coefficients in place: per element, `M * coefs(lambda * e)`.
///
/// # Panics
/// If `coefs.len()` is not a multiple of 4.
pub fn preprocess_coefs(party: PartyId, coefs: &mut [u16]) {
    assert_eq!(coefs.len() % 4, 0);
    let lambda = LAGRANGE_AT_ZERO[party.index()];
    for c in coefs.chunks_exact_mut(4) {
        let e = GaloisRingElement([c[0], c[1], c[2], c[3]]);
        c.copy_from_slice(&(lambda * e).to_basis_b());
    }
}

/// Party `party`'s preprocessed query code.
pub fn preprocess_code(party: PartyId, share: &CodeShare) -> PreprocessedCode {
    let mut out = PreprocessedCode(share.0);
    preprocess_coefs(party, &mut out.0);
    out
}

/// Party `party`'s preprocessed trimmed query mask.
pub fn preprocess_mask(party: PartyId, share: &MaskShare) -> PreprocessedMask {
    let mut out = PreprocessedMask(share.0);
    preprocess_coefs(party, &mut out.0);
    out
}

/// `sum db_i * query_i` mod 2^16: the reference party-local dot product the engines match.
///
/// # Panics
/// If the lengths differ.
pub fn dot(db: &[u16], query: &[u16]) -> u16 {
    assert_eq!(db.len(), query.len());
    db.iter()
        .zip(query)
        .fold(0u16, |acc, (&d, &q)| acc.wrapping_add(d.wrapping_mul(q)))
}

/// Party `party`'s additive shares `(cd, md)` for a database entry and a preprocessed query.
/// `md` is already doubled (the trimmed mask counts each usable pair once).
pub fn dot_shares(
    db_code: &CodeShare,
    db_mask: &MaskShare,
    query_code: &PreprocessedCode,
    query_mask: &PreprocessedMask,
) -> (u16, u16) {
    (
        dot(&db_code.0, &query_code.0),
        dot(&db_mask.0, &query_mask.0).wrapping_mul(2),
    )
}
