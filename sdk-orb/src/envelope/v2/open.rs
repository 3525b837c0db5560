//! Opening version 2: X-Wing HPKE in place, then the shares, or the seed expanded into them.

use hpke_pq::aead::{AeadTag, ChaCha20Poly1305};
use hpke_pq::inout::InOutBuf;
use hpke_pq::kdf::HkdfSha256;
use hpke_pq::{Deserializable, OpModeR};

use crate::keys::{HybridKem, NodeHybridSecretKey};
use crate::shamir::seeded::{expand_seed, seeded_party, ShareSeed};
use crate::shamir::PartyShares;
use crate::{PartyId, RequestId};

use super::super::format::*;
use super::super::open::{decode_payload_with, open_in_scratch};
use super::super::parse::{parse_view, EnvelopeView, V2};
use super::*;

impl<'a> EnvelopeView<'a, V2> {
    /// Decodes a version 2 envelope and checks its structure, as [`EnvelopeView::parse`] does
    /// for version 1.
    ///
    /// # Errors
    /// The first problem found, as an [`EnvelopeError`].
    pub fn parse_v2(bytes: &'a [u8]) -> Result<EnvelopeView<'a, V2>, EnvelopeError> {
        parse_view(bytes)
    }

    /// The party whose payload carries the seed.
    pub fn seeded_party(&self) -> PartyId {
        seeded_party(&self.meta.request_id)
    }

    /// Opens `party`'s payload with the party's X-Wing key into `out` (the seeded party's
    /// seed expanded), using `scratch` (at least [`ciphertext_len_v2`]`(party, seeded)`
    /// bytes; zeroized before returning) for in-place decryption. Verify the signature first.
    ///
    /// # Errors
    /// [`EnvelopeError::Decryption`] (opaque) if HPKE fails; the payload decoding errors of
    /// [`decode_payload_v2`]; [`EnvelopeError::BufferTooSmall`].
    pub fn open_into(
        &self,
        party: PartyId,
        key: &NodeHybridSecretKey,
        scratch: &mut [u8],
        out: &mut PartyShares,
    ) -> Result<(), EnvelopeError> {
        let sealed = self.payloads[party.index()];
        open_in_scratch(sealed.ciphertext, scratch, out, |buf, out| {
            let len = buf.len();
            let encapped =
                <HybridKem as hpke_pq::Kem>::EncappedKey::from_bytes(sealed.encapsulated_key)
                    .map_err(|_| EnvelopeError::Decryption)?;
            let tag = AeadTag::<ChaCha20Poly1305>::from_bytes(&sealed.ciphertext[len..])
                .map_err(|_| EnvelopeError::Decryption)?;
            hpke_pq::single_shot_open_inout_detached::<ChaCha20Poly1305, HkdfSha256, HybridKem>(
                &OpModeR::Base,
                &key.0,
                &encapped,
                &hpke_info_v2(party, &self.meta.request_id),
                InOutBuf::from(&mut buf[..]),
                &self.meta.header_v2(&self.orb_key),
                &tag,
            )
            .map_err(|_| EnvelopeError::Decryption)?;
            decode_payload_v2(buf, party, &self.meta.request_id, out)
        })
    }
}

/// Decodes and validates a decrypted version 2 payload for `party` of `request_id` into
/// `out`; for the seeded party, the seed is expanded into its shares.
///
/// # Errors
/// As [`super::super::decode_payload`], and [`EnvelopeError::Malformed`] for shares in the
/// seeded party's payload or a seed in another's, [`EnvelopeError::MissingField`] for a
/// missing seed.
pub fn decode_payload_v2(
    bytes: &[u8],
    party: PartyId,
    request_id: &RequestId,
    out: &mut PartyShares,
) -> Result<(), EnvelopeError> {
    if party != seeded_party(request_id) {
        return decode_payload_with(bytes, VERSION_V2, party, request_id, out, None);
    }
    let mut seed = ShareSeed([0; crate::shamir::seeded::SEED_BYTES]);
    decode_payload_with(bytes, VERSION_V2, party, request_id, out, Some(&mut seed))?;
    expand_seed(&seed, out);
    Ok(())
}

/// Opens `party`'s version 2 payload with a heap scratch buffer; see
/// [`EnvelopeView::open_into`].
///
/// # Errors
/// As [`EnvelopeView::open_into`].
#[cfg(feature = "alloc")]
pub fn open_payload_v2(
    view: &EnvelopeView<'_, V2>,
    party: PartyId,
    key: &NodeHybridSecretKey,
) -> Result<alloc::boxed::Box<PartyShares>, EnvelopeError> {
    let len = ciphertext_len_v2(party, view.seeded_party());
    let mut scratch = zeroize::Zeroizing::new(alloc::vec![0u8; len]);
    let mut out = alloc::boxed::Box::new(PartyShares::zero());
    view.open_into(party, key, &mut scratch, &mut out)?;
    Ok(out)
}
