//! Node recovery, the arithmetic (no I/O): a node that lost its store gets its Shamir shares back
//! from the other two without anyone learning an iris.
//!
//! Party `t`'s share of an element is `f(alpha_t)` for the degree-1 polynomial `f` whose values at
//! the helpers' points they hold: `f(alpha_t) = l_h f(alpha_h) + l_o f(alpha_o)` with
//! [`sdk_orb::shamir::lagrange_coefficient`]. Each helper sends its term masked by a pad drawn
//! from a ChaCha12 stream keyed by [`pad_seed`]; the lower helper adds the pad, the higher
//! subtracts it. The recovering node adds the two messages: the pads cancel and it holds exactly
//! its own share. Each message alone is uniformly random (a uniform pad added to anything), so
//! the recovering node learns nothing beyond its share, and the helpers receive nothing.
//!
//! The seed binds a [`PadSecret`] the lower helper draws afresh for every session and hands the
//! other helper, the recovering node's nonce, and the state the helpers serve
//! ([`HelperState`]). The recovering node chooses the nonce, so a seed that depended on the nonce
//! alone would repeat when it asked twice with one nonce, and the two answers' difference would
//! be the helper's Lagrange term of the difference of two states' shares, unmasked.
//!
//! Both helpers must walk the same entries in the same order (serial-id order) and draw one
//! 8-byte pad per ring element, in coefficient order: left code, left mask, right code, right
//! mask of each person.

use hkdf::Hkdf;
use rand_chacha::ChaCha12Rng;
use rand_core::{CryptoRng, RngCore, SeedableRng};
use sdk_orb::ring::GaloisRingElement;
use sdk_orb::shamir::{lagrange_coefficient, PartyShares, EVALUATION_POINTS};
use sdk_orb::PartyId;
use sha2::Sha256;
use zeroize::Zeroizing;

/// HKDF info prefix of the helpers' pad seed: `|| target || low helper || high helper ||
/// last applied batch || next serial id` (the counters big-endian u64).
pub const PAD_INFO: &[u8] = b"ocelli/recovery-pad/v2";

/// Bytes of a [`PadSecret`].
pub const PAD_SECRET_BYTES: usize = 32;

/// u16 coefficients of one person's shares (both eyes, code and trimmed mask).
pub const PERSON_COEFS: usize = 2 * (sdk_orb::CODE_COEFS + sdk_orb::MASK_COEFS);

/// The party that is neither `a` nor `b`.
///
/// # Panics
/// If `a == b`.
pub fn third(a: PartyId, b: PartyId) -> PartyId {
    assert_ne!(a, b);
    PartyId::ALL[3 - a.index() - b.index()]
}

/// The two helpers of `target`, lower party first: the first draws the session's
/// [`PadSecret`] and adds the pad.
pub fn helpers_of(target: PartyId) -> (PartyId, PartyId) {
    let [p0, p1, p2] = PartyId::ALL;
    match target.index() {
        0 => (p1, p2),
        1 => (p0, p2),
        _ => (p0, p1),
    }
}

/// The fresh randomness of one recovery session, drawn by the lower helper and known to the two
/// helpers only. Zeroized on drop; `Debug` hides it.
pub struct PadSecret(Zeroizing<[u8; PAD_SECRET_BYTES]>);

impl core::fmt::Debug for PadSecret {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PadSecret").finish_non_exhaustive()
    }
}

impl PadSecret {
    /// A fresh secret from `rng`.
    pub fn random(rng: &mut (impl CryptoRng + RngCore)) -> PadSecret {
        let mut bytes = Zeroizing::new([0u8; PAD_SECRET_BYTES]);
        rng.fill_bytes(bytes.as_mut());
        PadSecret(bytes)
    }

    /// The bytes, to hand to the other helper over an authenticated, encrypted link only.
    pub fn to_bytes(&self) -> Zeroizing<[u8; PAD_SECRET_BYTES]> {
        self.0.clone()
    }
}

/// A [`PadSecret`] of the wrong length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("a recovery pad secret is {PAD_SECRET_BYTES} bytes, not {0}")]
pub struct PadSecretLengthError(pub usize);

impl TryFrom<&[u8]> for PadSecret {
    type Error = PadSecretLengthError;
    fn try_from(bytes: &[u8]) -> Result<Self, Self::Error> {
        if bytes.len() != PAD_SECRET_BYTES {
            return Err(PadSecretLengthError(bytes.len()));
        }
        let mut out = Zeroizing::new([0u8; PAD_SECRET_BYTES]);
        out.copy_from_slice(bytes);
        Ok(PadSecret(out))
    }
}

/// The state a helper serves in a recovery session: its counters. Both helpers must serve the
/// same one for their pads to cancel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HelperState {
    /// The last batch applied.
    pub last_applied_batch: u64,
    /// The serial id the next enrolment gets.
    pub next_serial_id: u64,
}

/// The pad seed of the helpers of `target` for one session: HKDF-SHA256 with the session's
/// `secret` as input key material, the recovering node's `nonce` as salt, and [`PAD_INFO`]` ||
/// target || low helper || high helper || last applied batch || next serial id` as info.
pub fn pad_seed(
    target: PartyId,
    secret: &PadSecret,
    nonce: &[u8; 32],
    state: HelperState,
) -> Zeroizing<[u8; 32]> {
    let (low, high) = helpers_of(target);
    let hk = Hkdf::<Sha256>::new(Some(nonce), secret.0.as_ref());
    let mut info = [0u8; PAD_INFO.len() + 3 + 16];
    let (prefix, rest) = info.split_at_mut(PAD_INFO.len());
    prefix.copy_from_slice(PAD_INFO);
    let (parties, counters) = rest.split_at_mut(3);
    parties.copy_from_slice(&[target.get(), low.get(), high.get()]);
    counters[..8].copy_from_slice(&state.last_applied_batch.to_be_bytes());
    counters[8..].copy_from_slice(&state.next_serial_id.to_be_bytes());
    let mut seed = Zeroizing::new([0u8; 32]);
    hk.expand(&info, seed.as_mut())
        .expect("32 bytes is a valid HKDF-SHA256 output length");
    seed
}

/// One helper's side of a recovery session: its Lagrange coefficient, the pad stream and the
/// pad's sign.
pub struct Helper {
    coefficient: GaloisRingElement,
    adds_pad: bool,
    pads: ChaCha12Rng,
}

impl core::fmt::Debug for Helper {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Helper").finish_non_exhaustive()
    }
}

impl Helper {
    /// Helper `me` recovering `target`'s shares, with the session's seed from [`pad_seed`].
    ///
    /// # Panics
    /// If `me` is `target`.
    pub fn new(me: PartyId, target: PartyId, seed: &[u8; 32]) -> Helper {
        let other = third(me, target);
        Helper {
            coefficient: lagrange_coefficient(me, other, EVALUATION_POINTS[target.index()]),
            adds_pad: me < other,
            pads: ChaCha12Rng::from_seed(*seed),
        }
    }

    /// The message for share coefficients `share` (whole ring elements): `l * share +- pad`,
    /// per element.
    ///
    /// # Panics
    /// If the lengths differ or are not a multiple of 4.
    pub fn contribute(&mut self, share: &[u16], out: &mut [u16]) {
        assert!(share.len() == out.len() && share.len().is_multiple_of(4));
        for (s, o) in share.chunks_exact(4).zip(out.chunks_exact_mut(4)) {
            let mut bytes = Zeroizing::new([0u8; 8]);
            self.pads.fill_bytes(bytes.as_mut());
            let pad = GaloisRingElement::from_le_bytes(&bytes);
            let term = self.coefficient * GaloisRingElement([s[0], s[1], s[2], s[3]]);
            let masked = if self.adds_pad {
                term + pad
            } else {
                term - pad
            };
            o.copy_from_slice(&masked.0);
        }
    }

    /// The message for one person's shares, [`PERSON_COEFS`] coefficients in the order left
    /// code, left mask, right code, right mask.
    pub fn contribute_person(&mut self, shares: &PartyShares) -> Vec<u16> {
        self.contribute_parts(person_parts(shares))
    }

    /// [`Helper::contribute_person`] from the four parts (left code, left mask, right code,
    /// right mask), as a share database row holds them.
    ///
    /// # Panics
    /// If the parts are not a code, a mask, a code and a mask long.
    pub fn contribute_parts(&mut self, parts: [&[u16]; 4]) -> Vec<u16> {
        let mut out = vec![0u16; PERSON_COEFS];
        let mut at = 0;
        for part in parts {
            self.contribute(part, &mut out[at..at + part.len()]);
            at += part.len();
        }
        out
    }
}

fn person_parts(s: &PartyShares) -> [&[u16]; 4] {
    [
        s.left.code.coefs(),
        s.left.mask.coefs(),
        s.right.code.coefs(),
        s.right.mask.coefs(),
    ]
}

/// The recovering node's share from the two helpers' messages for one person.
///
/// # Panics
/// If either message is not [`PERSON_COEFS`] long.
pub fn combine_person(a: &[u16], b: &[u16]) -> PartyShares {
    assert!(a.len() == PERSON_COEFS && b.len() == PERSON_COEFS);
    let mut out = PartyShares::zero();
    let mut at = 0;
    let parts: [&mut [u16]; 4] = [
        out.left.code.coefs_mut(),
        out.left.mask.coefs_mut(),
        out.right.code.coefs_mut(),
        out.right.mask.coefs_mut(),
    ];
    for part in parts {
        // Ring addition is coefficient-wise.
        for (i, o) in part.iter_mut().enumerate() {
            *o = a[at + i].wrapping_add(b[at + i]);
        }
        at += part.len();
    }
    out
}

#[cfg(test)]
mod tests;
