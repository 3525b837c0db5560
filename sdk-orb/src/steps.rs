//! The steps of [`seal_envelope`](crate::envelope::seal_envelope), each callable alone, so the
//! firmware image can count the instructions of each. Not an API: a step does its work over
//! the same amount of data as the seal, without the checks and zeroizing around it.

use ed25519_dalek::Signer as _;
use hpke::aead::{AeadCtxS, ChaCha20Poly1305};
use hpke::kdf::HkdfSha256;
use hpke::{OpModeS, Serializable};
use rand_core::{CryptoRng, RngCore};

use crate::envelope::v2::envelope_len_v2;
use crate::envelope::{
    payload_len, sealed_digest, write_layout, write_payload_layout, EnvelopeDigest, EnvelopeError,
    RequestMeta, Version, ENCAPSULATED_KEY_BYTES, SIGNATURE_BYTES, V2,
};
use crate::keys::{Kem, NodePublicKeys, OrbSigningKey};
use crate::layout::{CODE_ELEMENTS, MASK_ELEMENTS};
use crate::ring::GaloisRingElement;
use crate::shamir::seeded::{SeedStream, ShareSeed};
use crate::shamir::{
    plain_group, share_element, write_element, TemplatePart, GROUP_ELEMENTS, RANDOMNESS_BLOCK,
};
use crate::template::IrisTemplate;
use crate::{PartyId, PARTIES};

/// A sender's HPKE context after the KEM encapsulation and the key schedule.
pub struct SenderContext(AeadCtxS<ChaCha20Poly1305, HkdfSha256, Kem>);

impl core::fmt::Debug for SenderContext {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SenderContext").finish_non_exhaustive()
    }
}

/// Coefficient extraction: the plain code and mask values of one eye.
pub fn coefficients(template: &IrisTemplate) -> u16 {
    let mut acc = 0u16;
    for part in [TemplatePart::Code, TemplatePart::Mask] {
        for group in 0..part.elements() / GROUP_ELEMENTS {
            for v in plain_group(template, part, group) {
                acc = acc.wrapping_add(v[0] ^ v[1] ^ v[2] ^ v[3]);
            }
        }
    }
    acc
}

/// Share randomness: what sharing one eye draws from `rng`.
pub fn randomness<R: RngCore + CryptoRng>(rng: &mut R) -> u8 {
    let mut bytes = [0u8; 8 * RANDOMNESS_BLOCK];
    let mut acc = 0u8;
    for _ in 0..(CODE_ELEMENTS + MASK_ELEMENTS) / RANDOMNESS_BLOCK {
        rng.fill_bytes(&mut bytes);
        acc ^= bytes[0];
    }
    acc
}

/// Sharing arithmetic: one eye's elements shared with `plain` and the randomness in `bytes`.
pub fn sharing(plain: &[u16; 4], bytes: &[u8; 8 * RANDOMNESS_BLOCK]) -> GaloisRingElement {
    let mut acc = GaloisRingElement::ZERO;
    for _ in 0..(CODE_ELEMENTS + MASK_ELEMENTS) / RANDOMNESS_BLOCK {
        for rb in bytes.chunks_exact(8) {
            let mut b = [0u8; 8];
            b.copy_from_slice(rb);
            let [s0, s1, s2] = share_element(plain, GaloisRingElement::from_le_bytes(&b));
            acc += s0 + s1 + s2;
        }
    }
    acc
}

/// Payload encoding: the three payloads' fields and both eyes' shares (all `shares`) written
/// into `out` (at least the sum of the payload lengths).
pub fn payload(meta: &RequestMeta, shares: &[GaloisRingElement; PARTIES], out: &mut [u8]) {
    let mut start = 0;
    let mut code_at = [[0usize; PARTIES]; 2];
    let mut mask_at = [[0usize; PARTIES]; 2];
    for party in PartyId::ALL {
        let len = payload_len(party);
        let pl = write_payload_layout(&mut out[start..start + len], party, &meta.request_id);
        for eye in 0..2 {
            code_at[eye][party.index()] = start + pl.code[eye];
            mask_at[eye][party.index()] = start + pl.mask[eye];
        }
        start += len;
    }
    for eye in 0..2 {
        for e in 0..CODE_ELEMENTS {
            write_element(out, &code_at[eye], e, shares);
        }
        for e in 0..MASK_ELEMENTS {
            write_element(out, &mask_at[eye], e, shares);
        }
    }
}

/// One party's KEM encapsulation and HPKE key schedule; writes the encapsulated key.
///
/// # Errors
/// [`EnvelopeError::Encryption`] for an invalid node key.
pub fn kem<R: RngCore + CryptoRng>(
    rng: &mut R,
    meta: &RequestMeta,
    nodes: &NodePublicKeys,
    party: PartyId,
    encapsulated: &mut [u8; ENCAPSULATED_KEY_BYTES],
) -> Result<SenderContext, EnvelopeError> {
    let info = crate::envelope::hpke_info(party, &meta.request_id);
    let (enc, ctx) = hpke::setup_sender::<ChaCha20Poly1305, HkdfSha256, Kem, R>(
        &OpModeS::Base,
        &nodes.0[party.index()].0,
        &info,
        rng,
    )
    .map_err(|_| EnvelopeError::Encryption)?;
    enc.write_exact(encapsulated);
    Ok(SenderContext(ctx))
}

/// One party's AEAD seal of `payload` in place under the envelope header.
///
/// # Errors
/// [`EnvelopeError::Encryption`] if the context refuses.
pub fn aead(
    ctx: &mut SenderContext,
    meta: &RequestMeta,
    orb: &OrbSigningKey,
    payload: &mut [u8],
) -> Result<[u8; 16], EnvelopeError> {
    let header = meta.header(&orb.verifying_key().to_bytes());
    let tag = ctx
        .0
        .seal_in_place_detached(payload, &header)
        .map_err(|_| EnvelopeError::Encryption)?;
    let mut out = [0u8; 16];
    tag.write_exact(&mut out);
    Ok(out)
}

/// The envelope digest of version `V` over the sealed envelope at the start of `envelope`
/// (its layout is written first, so only the sealed parts need be there).
pub fn envelope_digest<V: Version>(
    meta: &RequestMeta,
    orb: &OrbSigningKey,
    envelope: &mut [u8],
) -> EnvelopeDigest {
    let envelope = &mut envelope[..V::envelope_len(meta)];
    let orb_key = orb.verifying_key().to_bytes();
    let layout = write_layout::<V>(envelope, meta, &orb_key);
    let header = V::header(meta, &orb_key);
    sealed_digest::<V>(envelope, &layout, &meta.request_id, &header)
}

/// The orb's Ed25519 signature over the digest.
pub fn signature(orb: &OrbSigningKey, d: &EnvelopeDigest) -> [u8; SIGNATURE_BYTES] {
    orb.0.sign(&d.0).to_bytes()
}

/// One party's payload of envelope version 2 sealed in place: the X-Wing encapsulation, the
/// HPKE key schedule and the AEAD, through the seal's own function (a separate call into the
/// KEM would change how the firmware build inlines it, and with that the seal's stack).
///
/// # Errors
/// [`EnvelopeError::Encryption`] for an invalid node key.
pub fn seal_payload_v2<R: RngCore + CryptoRng>(
    rng: &mut R,
    meta: &RequestMeta,
    nodes: &crate::keys::NodeHybridPublicKeys,
    orb: &OrbSigningKey,
    party: PartyId,
    payload: &mut [u8],
) -> Result<(), EnvelopeError> {
    let header = meta.header_v2(&orb.verifying_key().to_bytes());
    crate::envelope::v2::seal_payload(rng, meta, nodes, party, &header, payload).map(drop)
}

/// Version 2: the three payload plaintexts written as the seal writes them (the seed's
/// keystream, coefficient extraction, the sharing arithmetic and the share bytes) into
/// `envelope` (at least `envelope_len_v2(meta)`).
pub fn payloads_v2(
    meta: &RequestMeta,
    orb: &OrbSigningKey,
    seed: &ShareSeed,
    left: &IrisTemplate,
    right: &IrisTemplate,
    envelope: &mut [u8],
) {
    let envelope = &mut envelope[..envelope_len_v2(meta)];
    let layout = write_layout::<V2>(envelope, meta, &orb.verifying_key().to_bytes());
    crate::envelope::v2::write_payloads(envelope, &layout, meta, seed.clone(), left, right);
}

/// Version 2: the seed's keystream for one person, as the sharing draws it.
pub fn keystream_v2(seed: &ShareSeed) -> u16 {
    let mut stream = SeedStream::new(seed);
    let mut group = [GaloisRingElement::ZERO; GROUP_ELEMENTS];
    let mut acc = 0u16;
    for _ in 0..2 * (CODE_ELEMENTS + MASK_ELEMENTS) / GROUP_ELEMENTS {
        stream.next_group(&mut group);
        acc ^= group[0].0[0];
    }
    acc
}
