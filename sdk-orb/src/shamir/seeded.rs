//! Seeded sharing (envelope version 2): one party's shares come from a 32-byte seed.
//!
//! Degree 1 leaves one share free. For each element with secret `s = S a`, the seeded party
//! `i` holds `y_i`, the next eight bytes of the seed's keystream read as a ring element
//! ([`GaloisRingElement::from_le_bytes`]); the polynomial's other coefficient is
//! `r = (y_i - s) alpha_i^-1`, and every party's share is `s + r alpha_j` as in
//! [`share_element`](super::share_element), so party `i`'s is `y_i`. The seeded party receives
//! only the seed and expands it ([`expand_seed`]). Because `y_i` does not depend on `s` and
//! `y -> (y - s) alpha_i^-1` is a bijection, `r` is as uniform as the keystream, so the three
//! shares are distributed as with fresh `r` (docs/design.md gives the argument).
//!
//! The keystream is ChaCha20 (20 rounds, 64-bit block counter and 64-bit nonce, both starting
//! at zero) keyed by the seed; elements are taken in the order left code, left mask, right
//! code, right mask, each in coefficient order.

use rand_core::{CryptoRng, RngCore};
use zeroize::{Zeroize, ZeroizeOnDrop};

use super::{plain_group, TemplatePart, GROUP_ELEMENTS};
use crate::ring::GaloisRingElement;
use crate::template::IrisTemplate;
use crate::{PartyId, PartyShares, RequestId, PARTIES};

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

/// Keystream bytes produced at a time: eight ChaCha20 blocks.
const STREAM_BUFFER: usize = 512;

/// The seed's keystream as ring elements.
///
/// ChaCha20 is computed here, one block at a time in 32-bit words, rather than through
/// `rand_chacha`: that crate's four-block vector form, emulated on a scalar core, cost the orb's
/// Cortex-M7 1.6 million instructions for one person's 76,800 bytes, and 3.0 million when the
/// image was built for `target-cpu=cortex-m7`; this block function takes 1.4 million either
/// way. The keystream is checked against RFC 8439's vectors and `rand_chacha` in the tests.
#[derive(Zeroize, ZeroizeOnDrop)]
pub struct SeedStream {
    key: [u32; 8],
    /// The next block's counter.
    block: u64,
    buffer: [u8; STREAM_BUFFER],
    /// Bytes of `buffer` already handed out.
    used: usize,
}

impl core::fmt::Debug for SeedStream {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SeedStream").finish_non_exhaustive()
    }
}

impl SeedStream {
    /// The keystream of `seed` from its start.
    pub fn new(seed: &ShareSeed) -> SeedStream {
        SeedStream {
            key: core::array::from_fn(|i| {
                u32::from_le_bytes([
                    seed.0[4 * i],
                    seed.0[4 * i + 1],
                    seed.0[4 * i + 2],
                    seed.0[4 * i + 3],
                ])
            }),
            block: 0,
            buffer: [0; STREAM_BUFFER],
            used: STREAM_BUFFER,
        }
    }

    /// The next element.
    pub fn next_element(&mut self) -> GaloisRingElement {
        let at = self.take(8);
        element_at(&self.buffer, at)
    }

    /// The next [`GROUP_ELEMENTS`] elements.
    pub fn next_group(&mut self, out: &mut [GaloisRingElement; GROUP_ELEMENTS]) {
        if !self.used.is_multiple_of(8 * GROUP_ELEMENTS) {
            // After single elements: the same keystream, element by element.
            out.iter_mut().for_each(|e| *e = self.next_element());
            return;
        }
        let at = self.take(8 * GROUP_ELEMENTS);
        for (j, e) in out.iter_mut().enumerate() {
            *e = element_at(&self.buffer, at + 8 * j);
        }
    }

    /// Hands out the next `n` buffered bytes (`n` divides the buffer): their offset.
    #[inline(always)]
    fn take(&mut self, n: usize) -> usize {
        if self.used == STREAM_BUFFER {
            self.refill();
        }
        let at = self.used;
        self.used += n;
        at
    }

    // Out of line: the callers' loops keep only the buffered path.
    #[inline(never)]
    fn refill(&mut self) {
        for out in self.buffer.chunks_exact_mut(64) {
            chacha20_block(&self.key, self.block, out);
            self.block += 1;
        }
        self.used = 0;
    }

    fn fill(&mut self, coefs: &mut [u16]) {
        let mut group = [GaloisRingElement::ZERO; GROUP_ELEMENTS];
        for chunk in coefs.chunks_exact_mut(4 * GROUP_ELEMENTS) {
            self.next_group(&mut group);
            for (c, e) in chunk.chunks_exact_mut(4).zip(&group) {
                c.copy_from_slice(&e.0);
            }
        }
        group.zeroize();
    }
}

/// ChaCha20 block `block` of `key` (RFC 8439's block function, with djb's layout: a 64-bit
/// block counter in words 12 and 13, a zero 64-bit nonce in 14 and 15) into `out`.
fn chacha20_block(key: &[u32; 8], block: u64, out: &mut [u8]) {
    let mut x: [u32; 16] = [
        0x6170_7865,
        0x3320_646e,
        0x7962_2d32,
        0x6b20_6574,
        key[0],
        key[1],
        key[2],
        key[3],
        key[4],
        key[5],
        key[6],
        key[7],
        block as u32,
        (block >> 32) as u32,
        0,
        0,
    ];
    let input = x;
    let mut quarter = |a: usize, b: usize, c: usize, d: usize| {
        x[a] = x[a].wrapping_add(x[b]);
        x[d] = (x[d] ^ x[a]).rotate_left(16);
        x[c] = x[c].wrapping_add(x[d]);
        x[b] = (x[b] ^ x[c]).rotate_left(12);
        x[a] = x[a].wrapping_add(x[b]);
        x[d] = (x[d] ^ x[a]).rotate_left(8);
        x[c] = x[c].wrapping_add(x[d]);
        x[b] = (x[b] ^ x[c]).rotate_left(7);
    };
    for _ in 0..10 {
        quarter(0, 4, 8, 12);
        quarter(1, 5, 9, 13);
        quarter(2, 6, 10, 14);
        quarter(3, 7, 11, 15);
        quarter(0, 5, 10, 15);
        quarter(1, 6, 11, 12);
        quarter(2, 7, 8, 13);
        quarter(3, 4, 9, 14);
    }
    for ((o, w), i) in out.chunks_exact_mut(4).zip(x.iter()).zip(input.iter()) {
        o.copy_from_slice(&w.wrapping_add(*i).to_le_bytes());
    }
    x.zeroize();
}

fn element_at(buffer: &[u8; STREAM_BUFFER], at: usize) -> GaloisRingElement {
    GaloisRingElement::from_le_bytes(&buffer.as_chunks::<8>().0[at / 8])
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

/// The three shares of the element with plain values `a` whose share for the `seeded` party
/// is `y`.
///
/// The other coefficient is `r = (y - s) alpha_i^-1`, and every evaluation point is a power of
/// `x` (`1`, `x`, and `1 + x = x^4` since `x^4 = x + 1`), so the inverse is zero, one or four
/// divisions by `x`, each a shuffle and a subtraction, not a ring product.
pub fn share_element_seeded(
    a: &[u16; 4],
    y: GaloisRingElement,
    seeded: PartyId,
) -> [GaloisRingElement; PARTIES] {
    match seeded.index() {
        0 => shares_dividing::<0>(a, y),
        1 => shares_dividing::<1>(a, y),
        _ => shares_dividing::<4>(a, y),
    }
}

/// [`share_element_seeded`] for the seeded party whose evaluation point is `x^DIVISIONS`.
#[inline(always)]
fn shares_dividing<const DIVISIONS: usize>(
    a: &[u16; 4],
    y: GaloisRingElement,
) -> [GaloisRingElement; PARTIES] {
    let s = GaloisRingElement::from_basis_a(a);
    let mut r = y - s;
    for _ in 0..DIVISIONS {
        r = r.div_x();
    }
    let rx = r.mul_x();
    [s + r, s + rx, s + r + rx]
}

/// One group's shares: party `p`'s share of the group's element `j` at `[p][j]`.
pub type GroupShares = [[GaloisRingElement; GROUP_ELEMENTS]; PARTIES];

/// Shares one eye with `seeded`'s shares drawn from `stream`, [`GROUP_ELEMENTS`] elements at
/// a time (no coefficient array), handing each group's shares to
/// `sink(vector, first element, shares)`.
pub fn share_eye_seeded<F>(
    template: &IrisTemplate,
    seeded: PartyId,
    stream: &mut SeedStream,
    sink: F,
) where
    F: FnMut(Vector, usize, &GroupShares),
{
    // One loop per evaluation point, so the divisions by x are straight-line code.
    match seeded.index() {
        0 => share_eye_dividing::<0, F>(template, stream, sink),
        1 => share_eye_dividing::<1, F>(template, stream, sink),
        _ => share_eye_dividing::<4, F>(template, stream, sink),
    }
}

fn share_eye_dividing<const DIVISIONS: usize, F>(
    template: &IrisTemplate,
    stream: &mut SeedStream,
    mut sink: F,
) where
    F: FnMut(Vector, usize, &GroupShares),
{
    // Reused for every group and wiped once at the end.
    let mut y = [GaloisRingElement::ZERO; GROUP_ELEMENTS];
    let mut plain = [[0u16; 4]; GROUP_ELEMENTS];
    let mut shares: GroupShares = [[GaloisRingElement::ZERO; GROUP_ELEMENTS]; PARTIES];
    for (vector, part) in [
        (Vector::Code, TemplatePart::Code),
        (Vector::Mask, TemplatePart::Mask),
    ] {
        for group in 0..part.elements() / GROUP_ELEMENTS {
            plain = plain_group(template, part, group);
            stream.next_group(&mut y);
            for j in 0..GROUP_ELEMENTS {
                let [a, b, c] = shares_dividing::<DIVISIONS>(&plain[j], y[j]);
                (shares[0][j], shares[1][j], shares[2][j]) = (a, b, c);
            }
            sink(vector, GROUP_ELEMENTS * group, &shares);
        }
    }
    y.zeroize();
    plain.zeroize();
    shares.zeroize();
}

#[cfg(test)]
pub(crate) mod tests;
