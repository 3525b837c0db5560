//! Degree-1 Shamir sharing over GR(2^16, 4) for the three parties, and reconstruction.
//!
//! For each ring element with plain values `a` (basis A): `s = S a`, `f(X) = s + r X` with a
//! fresh uniformly random element `r`; party `id` receives `f(alpha_{id+1})` with
//! `alpha = (1, x, 1 + x)`. Codes are shared as masked bitvectors; masks as their 0/1 bits,
//! trimmed to the real-part half (the first 6,400 coefficients).

use rand_core::{CryptoRng, RngCore};
use zeroize::Zeroize;

use crate::layout::{CHUNK_ELEMENTS, CODE_ELEMENTS, MASK_ELEMENTS};
use crate::ring::GaloisRingElement;
use crate::template::IrisTemplate;
use crate::{PartyId, CODE_COEFS, COLUMNS, MASK_COEFS, PARTIES};

/// The Shamir evaluation points: party `id` holds `alpha[id]` = 1, x, 1 + x.
pub const EVALUATION_POINTS: [GaloisRingElement; PARTIES] = [
    GaloisRingElement([1, 0, 0, 0]),
    GaloisRingElement([0, 1, 0, 0]),
    GaloisRingElement([1, 1, 0, 0]),
];

/// Defines a fixed-size secret array of u16 coefficients: zeroized on drop, hidden from
/// `Debug`, compared in constant time, serialised little-endian.
macro_rules! secret_coefs {
    ($(#[$doc:meta])* $name:ident, $len:expr) => {
        $(#[$doc])*
        #[derive(Clone, zeroize::Zeroize, zeroize::ZeroizeOnDrop)]
        pub struct $name(pub [u16; $len]);

        impl $name {
            /// Coefficients.
            pub const LEN: usize = $len;
            /// Bytes of the little-endian serialisation.
            pub const BYTES: usize = 2 * $len;

            /// All zero.
            pub const fn zero() -> Self {
                $name([0; $len])
            }

            /// The coefficients.
            pub fn coefs(&self) -> &[u16; $len] {
                &self.0
            }

            /// The coefficients, mutable.
            pub fn coefs_mut(&mut self) -> &mut [u16; $len] {
                &mut self.0
            }

            /// Writes the little-endian serialisation into `out`.
            ///
            /// # Panics
            /// If `out.len() != Self::BYTES`.
            pub fn write_le_bytes(&self, out: &mut [u8]) {
                assert_eq!(out.len(), Self::BYTES);
                for (o, c) in out.chunks_exact_mut(2).zip(self.0.iter()) {
                    o.copy_from_slice(&c.to_le_bytes());
                }
            }

            /// Reads the little-endian serialisation.
            ///
            /// # Errors
            /// The length found, if it is not `Self::BYTES`.
            pub fn read_le_bytes(bytes: &[u8], out: &mut Self) -> Result<(), usize> {
                if bytes.len() != Self::BYTES {
                    return Err(bytes.len());
                }
                for (c, b) in out.0.iter_mut().zip(bytes.chunks_exact(2)) {
                    *c = u16::from_le_bytes([b[0], b[1]]);
                }
                Ok(())
            }

            /// Rotated by `k` columns (a permutation of whole ring elements).
            pub fn rotated(&self, k: i32) -> Self {
                let mut out = Self::zero();
                crate::rotation::rotate_coefs(&self.0, k, &mut out.0);
                out
            }
        }

        impl subtle::ConstantTimeEq for $name {
            fn ct_eq(&self, other: &Self) -> subtle::Choice {
                self.0.ct_eq(&other.0)
            }
        }

        impl PartialEq for $name {
            fn eq(&self, other: &Self) -> bool {
                subtle::ConstantTimeEq::ct_eq(self, other).into()
            }
        }

        impl Eq for $name {}

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.debug_struct(stringify!($name)).finish_non_exhaustive()
            }
        }
    };
}
pub(crate) use secret_coefs;

secret_coefs!(
    /// One party's share of a masked code: 12,800 GR(2^16,4) coefficients in the packed layout.
    CodeShare,
    CODE_COEFS
);
secret_coefs!(
    /// One party's share of a trimmed mask: the first 6,400 coefficients.
    MaskShare,
    MASK_COEFS
);

/// One party's shares of one eye.
#[derive(Clone, PartialEq, Eq, Debug, Zeroize)]
pub struct EyeShares {
    /// The masked code share.
    pub code: CodeShare,
    /// The trimmed mask share.
    pub mask: MaskShare,
}

impl EyeShares {
    /// All zero.
    pub const fn zero() -> EyeShares {
        EyeShares {
            code: CodeShare::zero(),
            mask: MaskShare::zero(),
        }
    }
}

/// One party's shares of a person: both eyes.
#[derive(Clone, PartialEq, Eq, Debug, Zeroize)]
pub struct PartyShares {
    /// Left eye.
    pub left: EyeShares,
    /// Right eye.
    pub right: EyeShares,
}

impl PartyShares {
    /// All zero.
    pub const fn zero() -> PartyShares {
        PartyShares {
            left: EyeShares::zero(),
            right: EyeShares::zero(),
        }
    }
}

/// Which part of a template a share holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TemplatePart {
    /// The masked code: [`CODE_COEFS`] coefficients.
    Code,
    /// The trimmed mask: [`MASK_COEFS`] coefficients.
    Mask,
}

impl TemplatePart {
    /// Ring elements of this part's share.
    pub const fn elements(self) -> usize {
        match self {
            TemplatePart::Code => CODE_ELEMENTS,
            TemplatePart::Mask => MASK_ELEMENTS,
        }
    }
}

/// Ring elements in a [`plain_group`]: eight columns, whose bits share one 32-bit half-word
/// of each row.
pub const GROUP_ELEMENTS: usize = 8;

/// The plain values of ring element `element` of `part`: masked code values
/// (see [`masked_value`](crate::plaintext::masked_value)) or 0/1 mask bits.
///
/// # Panics
/// If `element >= part.elements()`.
pub fn plain_element(template: &IrisTemplate, part: TemplatePart, element: usize) -> [u16; 4] {
    plain_group(template, part, element / GROUP_ELEMENTS)[element % GROUP_ELEMENTS]
}

/// The plain values of elements `8 group .. 8 group + 8` of `part`, as [`plain_element`]
/// gives each.
///
/// Element `e` is column `c = e % 200` of the chunk `e / 200` = `(b, w, r1)`, and its
/// coefficient `k` holds bit `800 (4 k + r1) + 4 c + 2 w + b` (crate::layout). A row is 25
/// half-words of 32 bits, so eight consecutive columns of one row sit in one half-word, at
/// offsets `4 j + 2 w + b` from its top: four loads per vector serve eight elements, and the
/// bits are taken at fixed shifts, with no branch on a bit.
///
/// # Panics
/// If `group >= part.elements() / 8`.
pub fn plain_group(
    template: &IrisTemplate,
    part: TemplatePart,
    group: usize,
) -> [[u16; 4]; GROUP_ELEMENTS] {
    const HALVES_PER_ROW: usize = COLUMNS * 4 / 32;
    const GROUPS_PER_CHUNK: usize = CHUNK_ELEMENTS / GROUP_ELEMENTS;
    assert!(group < part.elements() / GROUP_ELEMENTS);
    let (chunk, g) = (group / GROUPS_PER_CHUNK, group % GROUPS_PER_CHUNK);
    let (b, w, r1) = (chunk / 8, chunk / 4 % 2, chunk % 4);
    // Bits stored most significant first: half-word `q` is the high half of word `q / 2` when
    // `q` is even.
    let half = |words: &[u64], q: usize| {
        let word = words[q / 2];
        let h = if q.is_multiple_of(2) {
            word >> 32
        } else {
            word
        };
        // Column j's bit moved to position 31 - 4 j.
        (h as u32) << (2 * w + b)
    };
    let (code, mask) = (template.code().words(), template.mask().words());
    let rows: [(u32, u32); 4] = core::array::from_fn(|k| {
        let q = (4 * k + r1) * HALVES_PER_ROW + g;
        (half(code, q), half(mask, q))
    });
    core::array::from_fn(|j| {
        let shift = 31 - 4 * j;
        core::array::from_fn(|k| {
            let m = ((rows[k].1 >> shift) & 1) as u16;
            match part {
                TemplatePart::Code => m.wrapping_sub(2 * (((rows[k].0 >> shift) & 1) as u16 & m)),
                TemplatePart::Mask => m,
            }
        })
    })
}

fn plain_coefs(template: &IrisTemplate, part: TemplatePart, out: &mut [u16]) {
    for (group, v) in out.chunks_exact_mut(4 * GROUP_ELEMENTS).enumerate() {
        let mut plain = plain_group(template, part, group);
        v.copy_from_slice(plain.as_flattened());
        plain.zeroize();
    }
}

/// Plain values of the masked code in the packed coefficient order.
pub fn code_coefs(template: &IrisTemplate, out: &mut [u16; CODE_COEFS]) {
    plain_coefs(template, TemplatePart::Code, out);
}

/// Plain 0/1 values of the trimmed mask in the packed coefficient order.
pub fn mask_coefs(template: &IrisTemplate, out: &mut [u16; MASK_COEFS]) {
    plain_coefs(template, TemplatePart::Mask, out);
}

/// The three shares of one element with plain values `a` and randomness `r`.
pub fn share_element(a: &[u16; 4], r: GaloisRingElement) -> [GaloisRingElement; PARTIES] {
    let s = GaloisRingElement::from_basis_a(a);
    let rx = r.mul_x();
    [s + r, s + rx, s + r + rx]
}

/// Elements drawn from the RNG per call to `fill_bytes`.
pub(crate) const RANDOMNESS_BLOCK: usize = 64;

/// Shares the plain coefficients `plain` (a multiple of 4 long) with fresh randomness from
/// `rng`, handing each element's three shares to `sink(element_index, shares)`. The building
/// block for writing shares straight into their destination (typed arrays or payloads).
pub fn share_with_sink<R, F>(rng: &mut R, plain: &[u16], mut sink: F)
where
    R: RngCore + CryptoRng,
    F: FnMut(usize, &[GaloisRingElement; PARTIES]),
{
    let mut bytes = [0u8; 8 * RANDOMNESS_BLOCK];
    for (block_index, block) in plain.chunks(4 * RANDOMNESS_BLOCK).enumerate() {
        rng.fill_bytes(&mut bytes);
        for (j, (a, rb)) in block.chunks_exact(4).zip(bytes.chunks_exact(8)).enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(rb);
            let r = GaloisRingElement::from_le_bytes(&b);
            let a = [a[0], a[1], a[2], a[3]];
            let mut shares = share_element(&a, r);
            sink(block_index * RANDOMNESS_BLOCK + j, &shares);
            shares.zeroize();
        }
    }
    bytes.zeroize();
}

/// Shares `part` of `template` with fresh randomness from `rng`, producing each element's plain
/// values only when it is shared, and hands each element's three shares to
/// `sink(element_index, shares)` in element order. Draws the same randomness in the same
/// order as [`share_with_sink`] over [`code_coefs`] or [`mask_coefs`], so the shares are
/// identical; holds one randomness block, never a whole part, on the stack. Sharing a person
/// is this for the left eye's code, its mask, then the right eye's.
pub fn share_template_streaming<R, F>(
    rng: &mut R,
    template: &IrisTemplate,
    part: TemplatePart,
    mut sink: F,
) where
    R: RngCore + CryptoRng,
    F: FnMut(usize, &[GaloisRingElement; PARTIES]),
{
    let mut bytes = [0u8; 8 * RANDOMNESS_BLOCK];
    let mut plain = [[0u16; 4]; GROUP_ELEMENTS];
    let mut shares = [GaloisRingElement::ZERO; PARTIES];
    for first in (0..part.elements()).step_by(RANDOMNESS_BLOCK) {
        rng.fill_bytes(&mut bytes);
        let count = RANDOMNESS_BLOCK.min(part.elements() - first);
        for (j, rb) in bytes.chunks_exact(8).take(count).enumerate() {
            let e = first + j;
            if e % GROUP_ELEMENTS == 0 {
                plain = plain_group(template, part, e / GROUP_ELEMENTS);
            }
            let mut b = [0u8; 8];
            b.copy_from_slice(rb);
            shares = share_element(
                &plain[e % GROUP_ELEMENTS],
                GaloisRingElement::from_le_bytes(&b),
            );
            sink(e, &shares);
        }
    }
    bytes.zeroize();
    plain.zeroize();
    shares.zeroize();
}

/// Writes one element's three shares little-endian into a byte buffer: party `p`'s share of
/// element `element` at `base[p] + 8 * element` (share arrays serialised in place).
///
/// # Panics
/// If a destination lies outside `out`.
pub fn write_element(
    out: &mut [u8],
    base: &[usize; PARTIES],
    element: usize,
    shares: &[GaloisRingElement; PARTIES],
) {
    for (b, s) in base.iter().zip(shares) {
        let at = b + 8 * element;
        s.write_le_bytes(&mut out[at..at + 8]);
    }
}

/// Shares plain coefficients with explicitly given randomness, one element of `randomness`
/// per ring element. Hazardous: only for known-answer vectors and tests; real sharing must
/// use fresh randomness ([`share_eye`]).
///
/// # Panics
/// If the lengths disagree.
pub fn hazmat_share_with_randomness(
    plain: &[u16],
    randomness: &[GaloisRingElement],
    out: [&mut [u16]; PARTIES],
) {
    assert_eq!(plain.len(), 4 * randomness.len());
    let [o0, o1, o2] = out;
    assert!(o0.len() == plain.len() && o1.len() == plain.len() && o2.len() == plain.len());
    for (e, (a, &r)) in plain.chunks_exact(4).zip(randomness).enumerate() {
        let shares = share_element(&[a[0], a[1], a[2], a[3]], r);
        o0[4 * e..4 * e + 4].copy_from_slice(&shares[0].0);
        o1[4 * e..4 * e + 4].copy_from_slice(&shares[1].0);
        o2[4 * e..4 * e + 4].copy_from_slice(&shares[2].0);
    }
}

/// Shares one eye for the three parties into `out[party]`: the code, then the mask.
pub fn share_eye<R: RngCore + CryptoRng>(
    rng: &mut R,
    template: &IrisTemplate,
    out: &mut [EyeShares; PARTIES],
) {
    share_template_streaming(rng, template, TemplatePart::Code, |e, shares| {
        for (o, s) in out.iter_mut().zip(shares) {
            o.code.0[4 * e..4 * e + 4].copy_from_slice(&s.0);
        }
    });
    share_template_streaming(rng, template, TemplatePart::Mask, |e, shares| {
        for (o, s) in out.iter_mut().zip(shares) {
            o.mask.0[4 * e..4 * e + 4].copy_from_slice(&s.0);
        }
    });
}

/// The degree-1 Lagrange coefficient of party `p`'s share for evaluating at `at` from the
/// shares of `p` and `q`: `f(at) = l_p f(alpha_p) + l_q f(alpha_q)` with
/// `l_p = (at - alpha_q) / (alpha_p - alpha_q)`. Differences of distinct evaluation points are
/// units, so the inverse exists. `at = 0` reconstructs the secret; `at = alpha_r` gives the
/// third party's share (node recovery).
///
/// # Panics
/// If `p == q`.
pub fn lagrange_coefficient(p: PartyId, q: PartyId, at: GaloisRingElement) -> GaloisRingElement {
    assert_ne!(p, q);
    let (ap, aq) = (EVALUATION_POINTS[p.index()], EVALUATION_POINTS[q.index()]);
    let inverse = (ap - aq)
        .inverse_vartime()
        .unwrap_or(GaloisRingElement::ZERO);
    (at - aq) * inverse
}

/// Reconstructs plain coefficients (basis A) from the shares of two distinct parties.
/// For tests and auditors: a node never holds two shares.
///
/// # Panics
/// If the parties are equal or the lengths disagree.
pub fn reconstruct(
    (p, share_p): (PartyId, &[u16]),
    (q, share_q): (PartyId, &[u16]),
    out: &mut [u16],
) {
    assert_ne!(p, q);
    assert!(
        share_p.len() == out.len() && share_q.len() == out.len() && out.len().is_multiple_of(4)
    );
    let mu_p = lagrange_coefficient(p, q, GaloisRingElement::ZERO);
    let mu_q = lagrange_coefficient(q, p, GaloisRingElement::ZERO);
    for ((o, sp), sq) in out
        .chunks_exact_mut(4)
        .zip(share_p.chunks_exact(4))
        .zip(share_q.chunks_exact(4))
    {
        let sp = GaloisRingElement([sp[0], sp[1], sp[2], sp[3]]);
        let sq = GaloisRingElement([sq[0], sq[1], sq[2], sq[3]]);
        o.copy_from_slice(&(mu_p * sp + mu_q * sq).to_basis_a());
    }
}

pub mod seeded;

#[cfg(test)]
mod tests;
