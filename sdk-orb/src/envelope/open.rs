//! Opening one party's payload: HPKE in place, then strict decoding of the shares.

use hpke::aead::{AeadTag, ChaCha20Poly1305};
use hpke::kdf::HkdfSha256;
use hpke::{Deserializable, OpModeR};
use zeroize::Zeroize;

use crate::keys::{Kem, NodeSecretKey};
use crate::pb::Reader;
use crate::shamir::seeded::{ShareSeed, SEED_BYTES};
use crate::shamir::{CodeShare, MaskShare, PartyShares};
use crate::{PartyId, RequestId, PROTOCOL_VERSION};

use super::format::*;
use super::parse::{fixed, EnvelopeView, SealedPayloadView};

impl<'a> EnvelopeView<'a> {
    /// Opens `party`'s payload with the party's key into `out`, using `scratch` (at least
    /// [`ciphertext_len`]`(party)` bytes; zeroized before returning) for in-place decryption.
    /// Verify the signature first.
    ///
    /// # Errors
    /// [`EnvelopeError::Decryption`] (opaque) if HPKE fails; the payload decoding errors of
    /// [`decode_payload`]; [`EnvelopeError::BufferTooSmall`].
    pub fn open_into(
        &self,
        party: PartyId,
        key: &NodeSecretKey,
        scratch: &mut [u8],
        out: &mut PartyShares,
    ) -> Result<(), EnvelopeError> {
        let sealed = self.payloads[party.index()];
        open_in_scratch(sealed.ciphertext, scratch, out, |buf, out| {
            open_in_place(self, party, key, sealed, buf)?;
            decode_payload(buf, party, &self.meta.request_id, out)
        })
    }
}

/// Copies the ciphertext `sealed` (tag last) into `scratch`, runs `open` (decrypt in place,
/// decode into `out`) on it, and zeroizes the plaintext, and `out` on failure.
pub(crate) fn open_in_scratch(
    sealed: &[u8],
    scratch: &mut [u8],
    out: &mut PartyShares,
    open: impl FnOnce(&mut [u8], &mut PartyShares) -> Result<(), EnvelopeError>,
) -> Result<(), EnvelopeError> {
    let len = sealed.len() - TAG_BYTES;
    let buf = scratch
        .get_mut(..len)
        .ok_or(EnvelopeError::BufferTooSmall {
            needed: sealed.len(),
        })?;
    buf.copy_from_slice(&sealed[..len]);
    let result = open(buf, out);
    buf.zeroize();
    if result.is_err() {
        out.zeroize();
    }
    result
}

pub(crate) fn open_in_place(
    view: &EnvelopeView<'_>,
    party: PartyId,
    key: &NodeSecretKey,
    sealed: SealedPayloadView<'_>,
    buf: &mut [u8],
) -> Result<(), EnvelopeError> {
    let len = buf.len();
    let encapped = <Kem as hpke::Kem>::EncappedKey::from_bytes(sealed.encapsulated_key)
        .map_err(|_| EnvelopeError::Decryption)?;
    let tag = AeadTag::<ChaCha20Poly1305>::from_bytes(&sealed.ciphertext[len..])
        .map_err(|_| EnvelopeError::Decryption)?;
    hpke::single_shot_open_in_place_detached::<ChaCha20Poly1305, HkdfSha256, Kem>(
        &OpModeR::Base,
        &key.0,
        &encapped,
        &hpke_info(party, &view.meta.request_id),
        buf,
        &view.meta.header(&view.orb_key),
        &tag,
    )
    .map_err(|_| EnvelopeError::Decryption)
}

/// Decodes and validates a decrypted payload for `party` of `request_id` into `out`.
///
/// # Errors
/// [`EnvelopeError::Malformed`], [`EnvelopeError::MissingField`], [`EnvelopeError::ShareLength`]
/// for a share of the wrong size, [`EnvelopeError::UnsupportedVersion`],
/// [`EnvelopeError::PayloadParty`], [`EnvelopeError::PayloadRequestId`].
pub fn decode_payload(
    bytes: &[u8],
    party: PartyId,
    request_id: &RequestId,
    out: &mut PartyShares,
) -> Result<(), EnvelopeError> {
    decode_payload_with(bytes, PROTOCOL_VERSION, party, request_id, out, None)
}

/// Decodes a payload of envelope `version`: the two eyes' shares into `out`, or, where `seed`
/// is given, the seed (field 6) instead of any share.
pub(crate) fn decode_payload_with(
    bytes: &[u8],
    expected_version: u32,
    party: PartyId,
    request_id: &RequestId,
    out: &mut PartyShares,
    mut seed: Option<&mut ShareSeed>,
) -> Result<(), EnvelopeError> {
    let mut r = Reader::new(bytes, &[]);
    let mut version = None;
    let mut payload_party = 0;
    let mut rid = None;
    let mut eyes = [false; 2];
    let mut seen_seed = false;
    let max_field = if seed.is_some() { 6 } else { 5 };
    while let Some((field, v)) = r.next(max_field)? {
        match field {
            1 => version = Some(v.varint()?),
            2 => {
                payload_party = match v.varint()? {
                    0 => return Err(EnvelopeError::Malformed("explicit zero party_id")),
                    p => p,
                }
            }
            3 => rid = Some(*fixed::<REQUEST_ID_BYTES>(v, "payload request_id")?),
            6 => {
                if let Some(seed) = seed.as_deref_mut() {
                    seed.0 = *fixed::<SEED_BYTES>(v, "seed")?;
                    seen_seed = true;
                }
            }
            _ if seed.is_some() => {
                return Err(EnvelopeError::Malformed("shares in a seeded payload"))
            }
            _ => {
                let (eye, names) = if field == 4 {
                    (&mut out.left, ["left.code", "left.mask"])
                } else {
                    (&mut out.right, ["right.code", "right.mask"])
                };
                decode_eye(v.bytes()?, eye, names)?;
                eyes[field as usize - 4] = true;
            }
        }
    }
    match version {
        Some(v) if v == expected_version as u64 => {}
        Some(v) => return Err(EnvelopeError::UnsupportedVersion(v)),
        None => return Err(EnvelopeError::MissingField("payload version")),
    }
    if payload_party != party.get() as u64 {
        return Err(EnvelopeError::PayloadParty {
            expected: party.get(),
            actual: payload_party,
        });
    }
    if rid.ok_or(EnvelopeError::MissingField("payload request_id"))? != request_id.0 {
        return Err(EnvelopeError::PayloadRequestId);
    }
    if seed.is_some() {
        return match seen_seed {
            true => Ok(()),
            false => Err(EnvelopeError::MissingField("seed")),
        };
    }
    if !eyes[0] {
        return Err(EnvelopeError::MissingField("left"));
    }
    if !eyes[1] {
        return Err(EnvelopeError::MissingField("right"));
    }
    Ok(())
}

pub(crate) fn decode_eye(
    bytes: &[u8],
    out: &mut crate::shamir::EyeShares,
    names: [&'static str; 2],
) -> Result<(), EnvelopeError> {
    let mut r = Reader::new(bytes, &[]);
    let mut seen = [false; 2];
    while let Some((field, v)) = r.next(2)? {
        let b = v.bytes()?;
        let (result, name, expected) = if field == 1 {
            (
                CodeShare::read_le_bytes(b, &mut out.code),
                names[0],
                CODE_BYTES,
            )
        } else {
            (
                MaskShare::read_le_bytes(b, &mut out.mask),
                names[1],
                MASK_BYTES,
            )
        };
        result.map_err(|actual| EnvelopeError::ShareLength {
            field: name,
            expected,
            actual,
        })?;
        seen[field as usize - 1] = true;
    }
    if !seen[0] {
        return Err(EnvelopeError::MissingField(names[0]));
    }
    if !seen[1] {
        return Err(EnvelopeError::MissingField(names[1]));
    }
    Ok(())
}

/// Opens `party`'s payload with a heap scratch buffer; see [`EnvelopeView::open_into`].
///
/// # Errors
/// As [`EnvelopeView::open_into`].
#[cfg(feature = "alloc")]
pub fn open_payload(
    view: &EnvelopeView<'_>,
    party: PartyId,
    key: &NodeSecretKey,
) -> Result<alloc::boxed::Box<PartyShares>, EnvelopeError> {
    let mut scratch = zeroize::Zeroizing::new(alloc::vec![0u8; ciphertext_len(party)]);
    let mut out = alloc::boxed::Box::new(PartyShares::zero());
    view.open_into(party, key, &mut scratch, &mut out)?;
    Ok(out)
}
