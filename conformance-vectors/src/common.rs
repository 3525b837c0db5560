//! Pieces several families share: seeds, templates in vectors, the RNG convention.

use rand_chacha::ChaCha20Rng;
use rand_core::{RngCore, SeedableRng};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use sdk_orb::ring::GaloisRingElement;
use sdk_orb::template::{IrisBits, IrisTemplate, TemplatePolicy, PACKED_BYTES};

use crate::format::Hex;

/// The seed for `label`: SHA-256 of `"ocelli/conformance/v1/" || label`. Vectors store the
/// 32 seed bytes themselves, so replaying needs no knowledge of this derivation.
pub fn seed(label: &str) -> [u8; 32] {
    Sha256::new()
        .chain_update(b"ocelli/conformance/v1/")
        .chain_update(label.as_bytes())
        .finalize()
        .into()
}

/// The RNG every vector names by its seed: ChaCha20 (RFC 8439 block function, 20 rounds,
/// `rand_chacha` 0.3 `ChaCha20Rng::from_seed`: key = seed, stream 0, counter from 0), read as
/// a byte stream.
pub fn rng(seed: &[u8; 32]) -> ChaCha20Rng {
    ChaCha20Rng::from_seed(*seed)
}

/// `n` ring elements from the byte stream of `rng`: 8 bytes per element, four little-endian
/// u16 coefficients. This is exactly how the SDK draws share randomness.
pub fn ring_elements(rng: &mut ChaCha20Rng, n: usize) -> Vec<GaloisRingElement> {
    (0..n)
        .map(|_| {
            let mut b = [0u8; 8];
            rng.fill_bytes(&mut b);
            GaloisRingElement([
                u16::from_le_bytes([b[0], b[1]]),
                u16::from_le_bytes([b[2], b[3]]),
                u16::from_le_bytes([b[4], b[5]]),
                u16::from_le_bytes([b[6], b[7]]),
            ])
        })
        .collect()
}

/// A template inside a vector: packed code and mask (`numpy.packbits`, 1,600 bytes each).
/// Validated with no minimum of usable bits unless a vector says otherwise.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackedTemplate {
    /// Packed code bits.
    pub code: Hex,
    /// Packed mask bits (1 = usable).
    pub mask: Hex,
}

impl PackedTemplate {
    /// The packed bits of `t`.
    pub fn of(t: &IrisTemplate) -> PackedTemplate {
        PackedTemplate {
            code: Hex(packed(t.code())),
            mask: Hex(packed(t.mask())),
        }
    }

    /// The template, with the version string [`sdk_orb::template::DEFAULT_VERSION`].
    ///
    /// # Errors
    /// Wrong lengths or a mask the SDK rejects.
    pub fn template(&self) -> Result<IrisTemplate, String> {
        let code = bits(&self.code, "code")?;
        let mask = bits(&self.mask, "mask")?;
        IrisTemplate::new(
            code,
            mask,
            sdk_orb::template::DEFAULT_VERSION,
            &TemplatePolicy { min_usable_bits: 0 },
        )
        .map_err(|e| format!("template: {e}"))
    }
}

/// Packed bytes of `b`.
pub fn packed(b: &IrisBits) -> Vec<u8> {
    let mut out = [0u8; PACKED_BYTES];
    b.to_packed(&mut out);
    out.to_vec()
}

/// Bits from packed bytes.
///
/// # Errors
/// A wrong length.
pub fn bits(h: &Hex, what: &str) -> Result<IrisBits, String> {
    IrisBits::try_from(h.0.as_slice()).map_err(|e| format!("{what}: {e}"))
}

/// A random template from the seed `label` (see [`sdk_orb::template::random`]).
pub fn random_template(label: &str, masked_fraction: f64) -> IrisTemplate {
    sdk_orb::template::random(&mut rng(&seed(label)), masked_fraction)
}

/// `t` with a fraction of its code bits flipped (by a seeded RNG): a noisy capture of the
/// same eye.
pub fn noisy_copy(t: &IrisTemplate, label: &str, flip_fraction: f64) -> IrisTemplate {
    let mut rng = rng(&seed(label));
    let mut code = t.code().clone();
    let threshold = (flip_fraction * u32::MAX as f64) as u32;
    for i in 0..sdk_orb::CODE_BITS {
        if rng.next_u32() < threshold {
            code.set(i, !code.get(i));
        }
    }
    IrisTemplate::new(
        code,
        t.mask().clone(),
        t.version(),
        &TemplatePolicy { min_usable_bits: 0 },
    )
    .unwrap_or_else(|_| t.clone())
}

/// Ring element from four coefficients in a [`crate::format::HexU16`].
///
/// # Errors
/// Not exactly four values.
pub fn element(h: &crate::format::HexU16, what: &str) -> Result<GaloisRingElement, String> {
    h.array::<4>(what).map(GaloisRingElement)
}

/// An element as [`crate::format::HexU16`].
pub fn hex_element(e: GaloisRingElement) -> crate::format::HexU16 {
    crate::format::HexU16(e.0.to_vec())
}

/// A party id from a vector.
///
/// # Errors
/// Not 0, 1 or 2.
pub fn party(id: u8) -> Result<sdk_orb::PartyId, String> {
    sdk_orb::PartyId::try_from(id).map_err(|e| e.to_string())
}
