//! Seeded sharing (envelope version 2): one party's shares come from a 32-byte seed.
//!
//! Degree 1 leaves one share free. For each element with secret `s = S a`, the seeded party
//! `i` holds `y_i`, the next eight bytes of the seed's keystream read as a ring element
//! ([`GaloisRingElement::from_le_bytes`]); the polynomial's other coefficient is
//! `r = (y_i - s) alpha_i^-1`, and every party's share is `s + r alpha_j` as in
//! [`share_element`], so party `i`'s is `y_i`. The seeded party receives only the seed and
//! expands it ([`expand_seed`]). Because `y_i` does not depend on `s` and `y -> (y - s)
//! alpha_i^-1` is a bijection, `r` is as uniform as the keystream, so the three shares are
//! distributed as with fresh `r` (docs/design.md gives the argument).
//!
//! The keystream is ChaCha20 (20 rounds, 64-bit block counter and 64-bit nonce, both starting
//! at zero) keyed by the seed; elements are taken in the order left code, left mask, right
//! code, right mask, each in coefficient order.

use rand_chacha::ChaCha20Rng;
use rand_core::{CryptoRng, RngCore, SeedableRng};
use zeroize::{Zeroize, ZeroizeOnDrop};

use super::{share_element, EVALUATION_POINTS};
use crate::layout::PLAIN_BIT_INDEX;
use crate::plaintext::masked_value;
use crate::ring::GaloisRingElement;
use crate::template::IrisTemplate;
use crate::{PartyId, PartyShares, RequestId, CODE_COEFS, MASK_COEFS, PARTIES};

/// Bytes of a share seed.
pub const SEED_BYTES: usize = 32;

/// The seed of the seeded party's shares. Zeroized on drop.
#[derive(Clone, Zeroize, ZeroizeOnDrop)]
pub struct ShareSeed(pub [u8; SEED_BYTES]);

impl ShareSeed {
    /// Draws a fresh seed.
    pub fn random<R: RngCore + CryptoRng>(rng: &mut R) -> ShareSeed {
        let mut seed = ShareSeed([0; SEED_BYTES]);
        rng.fill_bytes(&mut seed.0);
        seed
    }
}

impl core::fmt::Debug for ShareSeed {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ShareSeed").finish_non_exhaustive()
    }
}

/// The party that receives the seed for `request_id`: the request id read as a big-endian
/// 128-bit integer, mod 3. Request ids are random, so each node is seeded for a third of the
/// envelopes.
pub const fn seeded_party(request_id: &RequestId) -> PartyId {
    PartyId::ALL[(u128::from_be_bytes(request_id.0) % PARTIES as u128) as usize]
}

/// The seed's keystream as ring elements.
pub struct SeedStream(ChaCha20Rng);

/// The generator holds the seed's key and keystream, and has no `Zeroize`: overwrite it with
/// the zero key's state, through `black_box` so the store is not elided.
impl Drop for SeedStream {
    fn drop(&mut self) {
        self.0 = ChaCha20Rng::from_seed([0; SEED_BYTES]);
        core::hint::black_box(&self.0);
    }
}

impl core::fmt::Debug for SeedStream {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SeedStream").finish_non_exhaustive()
    }
}

impl SeedStream {
    /// The keystream of `seed` from its start.
    pub fn new(seed: &ShareSeed) -> SeedStream {
        SeedStream(ChaCha20Rng::from_seed(seed.0))
    }

    /// The next element.
    pub fn next_element(&mut self) -> GaloisRingElement {
        let mut b = [0u8; 8];
        self.0.fill_bytes(&mut b);
        let e = GaloisRingElement::from_le_bytes(&b);
        b.zeroize();
        e
    }

    fn fill(&mut self, coefs: &mut [u16]) {
        for chunk in coefs.chunks_exact_mut(4) {
            chunk.copy_from_slice(&self.next_element().0);
        }
    }
}

/// The seeded party's shares: the seed's keystream in payload order.
pub fn expand_seed(seed: &ShareSeed, out: &mut PartyShares) {
    let mut stream = SeedStream::new(seed);
    for eye in [&mut out.left, &mut out.right] {
        stream.fill(&mut eye.code.0);
        stream.fill(&mut eye.mask.0);
    }
}

/// Which share vector of an eye an element belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vector {
    /// The masked code (element index below `CODE_COEFS / 4`).
    Code,
    /// The trimmed mask (element index below `MASK_COEFS / 4`).
    Mask,
}

/// The three shares of the element with plain values `a` whose share for the seeded party is
/// `y`; `inverse_alpha` is the inverse of that party's evaluation point.
pub fn share_element_seeded(
    a: &[u16; 4],
    y: GaloisRingElement,
    inverse_alpha: GaloisRingElement,
) -> [GaloisRingElement; PARTIES] {
    let s = GaloisRingElement::from_basis_a(a);
    share_element(a, (y - s) * inverse_alpha)
}

/// Shares one eye with `seeded`'s shares drawn from `stream`, element by element (no
/// coefficient array), handing each element's shares to `sink(vector, element, shares)`.
pub fn share_eye_seeded<F>(
    template: &IrisTemplate,
    seeded: PartyId,
    stream: &mut SeedStream,
    mut sink: F,
) where
    F: FnMut(Vector, usize, &[GaloisRingElement; PARTIES]),
{
    let inverse_alpha = EVALUATION_POINTS[seeded.index()]
        .inverse_vartime()
        .unwrap_or(GaloisRingElement::ZERO);
    let (code, mask) = (template.code(), template.mask());
    for (vector, elements) in [
        (Vector::Code, CODE_COEFS / 4),
        (Vector::Mask, MASK_COEFS / 4),
    ] {
        for e in 0..elements {
            let mut a: [u16; 4] = core::array::from_fn(|k| {
                let bit = PLAIN_BIT_INDEX[4 * e + k] as usize;
                match vector {
                    Vector::Code => masked_value(code.get(bit), mask.get(bit)),
                    Vector::Mask => mask.get(bit) as u16,
                }
            });
            let mut shares = share_element_seeded(&a, stream.next_element(), inverse_alpha);
            sink(vector, e, &shares);
            shares.zeroize();
            a.zeroize();
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
