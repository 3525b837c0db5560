//! Sealing: shares written straight into the payload regions, sealed in place, signed.

use ed25519_dalek::Signer as _;
use hpke::aead::ChaCha20Poly1305;
use hpke::kdf::HkdfSha256;
use hpke::{OpModeS, Serializable};
use rand_core::{CryptoRng, RngCore};
use zeroize::Zeroize;

use crate::keys::{Kem, NodePublicKeys, OrbSigningKey};
use crate::shamir::{share_template_streaming, write_element, PartyShares, TemplatePart};
use crate::template::IrisTemplate;
use crate::{PartyId, RequestId, PARTIES};

use super::format::*;
use super::parse::{sealed_digest, write_layout, Version, V1};

/// Encodes one party's payload into `out` (exactly `payload_len(party)` bytes).
///
/// # Errors
/// [`EnvelopeError::BufferTooSmall`] if `out` is shorter than `payload_len(party)`.
pub fn encode_payload(
    party: PartyId,
    request_id: &RequestId,
    shares: &PartyShares,
    out: &mut [u8],
) -> Result<usize, EnvelopeError> {
    let n = payload_len(party);
    let out = first(out, n)?;
    let layout = write_payload_layout(out, party, request_id);
    for (eye, shares) in [&shares.left, &shares.right].into_iter().enumerate() {
        let c = layout.code[eye];
        shares.code.write_le_bytes(&mut out[c..c + CODE_BYTES]);
        let m = layout.mask[eye];
        shares.mask.write_le_bytes(&mut out[m..m + MASK_BYTES]);
    }
    Ok(n)
}

/// Builds a complete signed envelope for a person (`left`, `right`) into `out`; returns its
/// length, [`envelope_len`]`(meta)`, at most [`MAX_ENVELOPE_LEN`].
///
/// Fresh share randomness, HPKE ephemeral keys and nothing else come from `rng`.
///
/// # Errors
/// [`EnvelopeError::SerialId`] for a serial id that does not fit the request type,
/// [`EnvelopeError::BufferTooSmall`], [`EnvelopeError::Encryption`] for an invalid node key.
pub fn seal_envelope<R: RngCore + CryptoRng>(
    rng: &mut R,
    meta: &RequestMeta,
    left: &IrisTemplate,
    right: &IrisTemplate,
    nodes: &NodePublicKeys,
    orb: &OrbSigningKey,
    out: &mut [u8],
) -> Result<usize, EnvelopeError> {
    meta.validate()?;
    let n = envelope_len(meta);
    let out = first(out, n)?;
    let orb_key = orb.verifying_key().to_bytes();
    let layout = write_layout::<V1>(out, meta, &orb_key);

    // Payload plaintexts in place, then shares written straight into them.
    let mut code_at = [[0usize; PARTIES]; 2];
    let mut mask_at = [[0usize; PARTIES]; 2];
    for party in PartyId::ALL {
        let start = layout.ct[party.index()];
        let region = &mut out[start..start + payload_len(party)];
        let pl = write_payload_layout(region, party, &meta.request_id);
        for eye in 0..2 {
            code_at[eye][party.index()] = start + pl.code[eye];
            mask_at[eye][party.index()] = start + pl.mask[eye];
        }
    }
    for (eye, template) in [left, right].into_iter().enumerate() {
        share_template_streaming(rng, template, TemplatePart::Code, |e, shares| {
            write_element(out, &code_at[eye], e, shares)
        });
        share_template_streaming(rng, template, TemplatePart::Mask, |e, shares| {
            write_element(out, &mask_at[eye], e, shares)
        });
    }

    seal_and_sign(rng, meta, nodes, orb, out, &layout)?;
    Ok(n)
}

/// Builds a signed envelope around caller-chosen payload plaintexts, each exactly
/// [`payload_len`]`(party)` bytes. Hazardous: for negative test vectors and tests of the
/// opening side (payloads with wrong share lengths, wrong party ids); orbs use
/// [`seal_envelope`].
///
/// # Errors
/// As [`seal_envelope`], and [`EnvelopeError::Length`] for a plaintext of the wrong length.
pub fn hazmat_seal_plaintexts<R: RngCore + CryptoRng>(
    rng: &mut R,
    meta: &RequestMeta,
    plaintexts: [&[u8]; PARTIES],
    nodes: &NodePublicKeys,
    orb: &OrbSigningKey,
    out: &mut [u8],
) -> Result<usize, EnvelopeError> {
    let (n, layout) = place_plaintexts::<V1>(meta, plaintexts, orb, out)?;
    seal_and_sign(rng, meta, nodes, orb, out, &layout)?;
    Ok(n)
}

/// Writes the layout of a version `V` envelope for `meta` into `out` with the caller's
/// payload plaintexts in place; returns the envelope length and the layout.
pub(crate) fn place_plaintexts<V: Version>(
    meta: &RequestMeta,
    plaintexts: [&[u8]; PARTIES],
    orb: &OrbSigningKey,
    out: &mut [u8],
) -> Result<(usize, EnvelopeLayout), EnvelopeError> {
    let n = V::envelope_len(meta);
    let out = first(out, n)?;
    let layout = write_layout::<V>(out, meta, &orb.verifying_key().to_bytes());
    for (party, plaintext) in PartyId::ALL.into_iter().zip(plaintexts) {
        let len = V::ciphertext_len(party, &meta.request_id) - TAG_BYTES;
        if plaintext.len() != len {
            return Err(EnvelopeError::Length {
                field: "payload",
                expected: len,
                actual: plaintext.len(),
            });
        }
        let start = layout.ct[party.index()];
        out[start..start + len].copy_from_slice(plaintext);
    }
    Ok((n, layout))
}

/// Seals the three plaintext regions of `out` in place and signs the envelope.
pub(crate) fn seal_and_sign<R: RngCore + CryptoRng>(
    rng: &mut R,
    meta: &RequestMeta,
    nodes: &NodePublicKeys,
    orb: &OrbSigningKey,
    out: &mut [u8],
    layout: &EnvelopeLayout,
) -> Result<(), EnvelopeError> {
    let header = meta.header(&orb.verifying_key().to_bytes());
    for party in PartyId::ALL {
        let (start, len) = (layout.ct[party.index()], payload_len(party));
        let info = hpke_info(party, &meta.request_id);
        let sealed = hpke::single_shot_seal_in_place_detached::<ChaCha20Poly1305, HkdfSha256, Kem, R>(
            &OpModeS::Base,
            &nodes.0[party.index()].0,
            &info,
            &mut out[start..start + len],
            &header,
            rng,
        );
        let (encapped, tag) = match sealed {
            Ok(sealed) => sealed,
            Err(_) => {
                // Leave no plaintext share behind in the caller's buffer.
                out.zeroize();
                return Err(EnvelopeError::Encryption);
            }
        };
        tag.write_exact(&mut out[start + len..start + len + TAG_BYTES]);
        let e = layout.enc[party.index()];
        encapped.write_exact(&mut out[e..e + ENCAPSULATED_KEY_BYTES]);
    }
    sign_envelope::<V1>(out, layout, &meta.request_id, &header, orb);
    Ok(())
}

/// Signs the digest of the sealed version `V` envelope in `out` into its signature field.
pub(crate) fn sign_envelope<V: Version>(
    out: &mut [u8],
    layout: &EnvelopeLayout,
    request_id: &RequestId,
    header: &[u8; HEADER_BYTES],
    orb: &OrbSigningKey,
) {
    let d = sealed_digest::<V>(out, layout, request_id, header);
    let signature = orb.0.sign(&d.0);
    out[layout.sig..layout.sig + SIGNATURE_BYTES].copy_from_slice(&signature.to_bytes());
}

/// Seals into a new vector; see [`seal_envelope`].
///
/// # Errors
/// As [`seal_envelope`].
#[cfg(feature = "alloc")]
pub fn seal_envelope_to_vec<R: RngCore + CryptoRng>(
    rng: &mut R,
    meta: &RequestMeta,
    left: &IrisTemplate,
    right: &IrisTemplate,
    nodes: &NodePublicKeys,
    orb: &OrbSigningKey,
) -> Result<alloc::vec::Vec<u8>, EnvelopeError> {
    let mut out = alloc::vec![0u8; envelope_len(meta)];
    seal_envelope(rng, meta, left, right, nodes, orb, &mut out)?;
    Ok(out)
}
