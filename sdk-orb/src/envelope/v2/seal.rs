//! Sealing version 2: shares streamed into the two full payloads, the seed into the third,
//! each sealed in place with X-Wing HPKE, then signed.

use hpke_pq::aead::ChaCha20Poly1305;
use hpke_pq::inout::InOutBuf;
use hpke_pq::kdf::HkdfSha256;
use hpke_pq::{OpModeS, Serializable};
use rand_core::{CryptoRng, RngCore};
use zeroize::Zeroize;

use crate::keys::{HybridKem, NodeHybridPublicKeys, OrbSigningKey, PqRng};
use crate::shamir::seeded::{
    seeded_party, share_eye_seeded, GroupShares, SeedStream, ShareSeed, Vector,
};
use crate::shamir::GROUP_ELEMENTS;
use crate::template::IrisTemplate;
use crate::{PartyId, PARTIES};

use super::super::format::*;
use super::super::parse::{write_layout, V2};
use super::super::seal::{place_plaintexts, sign_envelope};
use super::*;

/// Builds a complete signed version 2 envelope for a person (`left`, `right`) into `out`;
/// returns its length, [`envelope_len_v2`]`(meta)`, at most [`MAX_ENVELOPE_LEN_V2`].
///
/// The seed, HPKE encapsulation randomness and nothing else come from `rng`. The stack holds
/// one element's shares at a time, never an eye's coefficients.
///
/// # Errors
/// [`EnvelopeError::SerialId`] for a serial id that does not fit the request type,
/// [`EnvelopeError::BufferTooSmall`], [`EnvelopeError::Encryption`] if HPKE refuses to seal.
pub fn seal_envelope_v2<R: RngCore + CryptoRng>(
    rng: &mut R,
    meta: &RequestMeta,
    left: &IrisTemplate,
    right: &IrisTemplate,
    nodes: &NodeHybridPublicKeys,
    orb: &OrbSigningKey,
    out: &mut [u8],
) -> Result<usize, EnvelopeError> {
    meta.validate()?;
    let n = envelope_len_v2(meta);
    let out = first(out, n)?;
    let orb_key = orb.verifying_key().to_bytes();
    let layout = write_layout::<V2>(out, meta, &orb_key);
    let seed = ShareSeed::random(rng);
    write_payloads(out, &layout, meta, seed, left, right);
    seal_and_sign_v2(rng, meta, nodes, orb, out, &layout)?;
    Ok(n)
}

/// Writes the three payload plaintexts into their places in `out`: the seed into the seeded
/// party's, both eyes' shares into the other two, streamed from the templates.
#[inline(always)]
pub(crate) fn write_payloads(
    out: &mut [u8],
    layout: &EnvelopeLayout,
    meta: &RequestMeta,
    seed: ShareSeed,
    left: &IrisTemplate,
    right: &IrisTemplate,
) {
    let seeded = seeded_party(&meta.request_id);
    let mut code_at = [[0usize; PARTIES]; 2];
    let mut mask_at = [[0usize; PARTIES]; 2];
    for party in PartyId::ALL {
        let start = layout.ct[party.index()];
        let region = &mut out[start..start + payload_len_v2(party, seeded)];
        if let Some(pl) = write_payload_layout_v2(region, party, seeded, &meta.request_id, &seed) {
            for eye in 0..2 {
                code_at[eye][party.index()] = start + pl.code[eye];
                mask_at[eye][party.index()] = start + pl.mask[eye];
            }
        }
    }
    let mut stream = SeedStream::new(&seed);
    drop(seed);
    for (eye, template) in [left, right].into_iter().enumerate() {
        share_eye_seeded(template, seeded, &mut stream, |vector, first, shares| {
            let at = match vector {
                Vector::Code => &code_at[eye],
                Vector::Mask => &mask_at[eye],
            };
            write_unseeded(out, at, seeded, first, shares);
        });
    }
}

/// Writes the shares of the group starting at element `first` of the two parties other than
/// `seeded` at `base[party]`.
fn write_unseeded(
    out: &mut [u8],
    base: &[usize; PARTIES],
    seeded: PartyId,
    first: usize,
    shares: &GroupShares,
) {
    for party in PartyId::ALL.into_iter().filter(|&p| p != seeded) {
        let at = base[party.index()] + 8 * first;
        let dst = &mut out[at..at + 8 * GROUP_ELEMENTS];
        for (d, element) in dst.chunks_exact_mut(8).zip(&shares[party.index()]) {
            element.write_le_bytes(d);
        }
    }
}

/// Builds a signed version 2 envelope around caller-chosen payload plaintexts, each exactly
/// [`payload_len_v2`]`(party, seeded_party(request id))` bytes. Hazardous: for negative test
/// vectors and tests of the opening side; orbs use [`seal_envelope_v2`].
///
/// # Errors
/// As [`seal_envelope_v2`], and [`EnvelopeError::Length`] for a plaintext of the wrong length.
pub fn hazmat_seal_plaintexts_v2<R: RngCore + CryptoRng>(
    rng: &mut R,
    meta: &RequestMeta,
    plaintexts: [&[u8]; PARTIES],
    nodes: &NodeHybridPublicKeys,
    orb: &OrbSigningKey,
    out: &mut [u8],
) -> Result<usize, EnvelopeError> {
    let (n, layout) = place_plaintexts::<V2>(meta, plaintexts, orb, out)?;
    seal_and_sign_v2(rng, meta, nodes, orb, out, &layout)?;
    Ok(n)
}

/// Seals the three plaintext regions of `out` in place and signs the envelope.
fn seal_and_sign_v2<R: RngCore + CryptoRng>(
    rng: &mut R,
    meta: &RequestMeta,
    nodes: &NodeHybridPublicKeys,
    orb: &OrbSigningKey,
    out: &mut [u8],
    layout: &EnvelopeLayout,
) -> Result<(), EnvelopeError> {
    let header = meta.header_v2(&orb.verifying_key().to_bytes());
    let seeded = seeded_party(&meta.request_id);
    for party in PartyId::ALL {
        let (start, len) = (layout.ct[party.index()], payload_len_v2(party, seeded));
        let (encapped, tag) = match seal_payload(
            rng,
            meta,
            nodes,
            party,
            &header,
            &mut out[start..start + len],
        ) {
            Ok(sealed) => sealed,
            Err(e) => {
                // Leave no plaintext share behind in the caller's buffer.
                out.zeroize();
                return Err(e);
            }
        };
        out[start + len..start + len + TAG_BYTES].copy_from_slice(&tag);
        let e = layout.enc[party.index()];
        out[e..e + HYBRID_ENCAPSULATED_KEY_BYTES].copy_from_slice(&encapped);
    }
    sign_envelope::<V2>(out, layout, &meta.request_id, &header, orb);
    Ok(())
}

/// Seals party `party`'s payload plaintext `payload` in place: the X-Wing encapsulation to its
/// key, the HPKE key schedule and the AEAD under `header`. Returns the encapsulated key and the
/// tag. The firmware image's step measurement calls this too, so it measures the seal's own
/// code.
pub(crate) fn seal_payload<R: RngCore + CryptoRng>(
    rng: &mut R,
    meta: &RequestMeta,
    nodes: &NodeHybridPublicKeys,
    party: PartyId,
    header: &[u8],
    payload: &mut [u8],
) -> Result<([u8; HYBRID_ENCAPSULATED_KEY_BYTES], [u8; TAG_BYTES]), EnvelopeError> {
    let info = hpke_info_v2(party, &meta.request_id);
    let (encapped, tag) = hpke_pq::single_shot_seal_inout_detached_with_rng::<
        ChaCha20Poly1305,
        HkdfSha256,
        HybridKem,
    >(
        &OpModeS::Base,
        &nodes.0[party.index()].0,
        &info,
        InOutBuf::from(payload),
        header,
        &mut PqRng(rng),
    )
    .map_err(|_| EnvelopeError::Encryption)?;
    let mut e = [0u8; HYBRID_ENCAPSULATED_KEY_BYTES];
    encapped.write_exact(&mut e);
    let mut t = [0u8; TAG_BYTES];
    tag.write_exact(&mut t);
    Ok((e, t))
}

/// Seals into a new vector; see [`seal_envelope_v2`].
///
/// # Errors
/// As [`seal_envelope_v2`].
#[cfg(feature = "alloc")]
pub fn seal_envelope_v2_to_vec<R: RngCore + CryptoRng>(
    rng: &mut R,
    meta: &RequestMeta,
    left: &IrisTemplate,
    right: &IrisTemplate,
    nodes: &NodeHybridPublicKeys,
    orb: &OrbSigningKey,
) -> Result<alloc::vec::Vec<u8>, EnvelopeError> {
    let mut out = alloc::vec![0u8; envelope_len_v2(meta)];
    seal_envelope_v2(rng, meta, left, right, nodes, orb, &mut out)?;
    Ok(out)
}
