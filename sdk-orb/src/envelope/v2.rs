//! Envelope version 2: hybrid post-quantum HPKE, one party's shares as a seed.
//!
//! The wire format is version 1's with three changes. Payloads are sealed with RFC 9180 base
//! mode, KEM X-Wing (MLKEM768-X25519, id 0x647a), HKDF-SHA256, ChaCha20-Poly1305, so an
//! encapsulated key is 1,120 bytes. The digest and info domains are `"ocelli/envelope/v2"`
//! and `"ocelli/payload/v2"`, and the header and payloads carry version 2. And the party
//! [`seeded_party`]`(request id)` receives, instead of its shares, field 6: the 32-byte seed
//! from which it expands them ([`crate::shamir::seeded`]); the other two payloads are version
//! 1's with version 2. The opened shares are distributed exactly as version 1's.

mod open;
mod seal;

use crate::keys::KEY_BYTES;
use crate::pb::{len_field_len, uint_field_len, Writer};
use crate::shamir::seeded::{seeded_party, ShareSeed, SEED_BYTES};
use crate::{PartyId, RequestId, RequestType, PARTIES};

use super::format::*;
use super::parse::{Version, V2};

pub use self::open::decode_payload_v2;
#[cfg(feature = "alloc")]
pub use self::open::open_payload_v2;
#[cfg(feature = "alloc")]
pub use self::seal::seal_envelope_v2_to_vec;
pub use self::seal::{hazmat_seal_plaintexts_v2, seal_envelope_v2};
#[cfg(feature = "measure-steps")]
pub(crate) use self::seal::{seal_payload, write_payloads};

/// The version number of these envelopes.
pub const VERSION_V2: u32 = 2;
/// Domain separator of the version 2 envelope digest.
pub const DIGEST_DOMAIN_V2: &[u8; 18] = b"ocelli/envelope/v2";
/// Domain separator of the version 2 HPKE info string.
pub const INFO_DOMAIN_V2: &[u8; 17] = b"ocelli/payload/v2";
/// Bytes of an X-Wing encapsulated key.
pub const HYBRID_ENCAPSULATED_KEY_BYTES: usize = 1120;

/// The HPKE info string for `party`'s version 2 payload of `request_id`.
pub fn hpke_info_v2(party: PartyId, request_id: &RequestId) -> [u8; INFO_DOMAIN.len() + 17] {
    info_with(INFO_DOMAIN_V2, party, request_id)
}

impl RequestMeta {
    /// The version 2 header bytes: HPKE AAD and digest prefix.
    pub fn header_v2(&self, orb_key: &[u8; KEY_BYTES]) -> [u8; HEADER_BYTES] {
        self.header_with(DIGEST_DOMAIN_V2, VERSION_V2, orb_key)
    }
}

/// Plaintext bytes of `party`'s version 2 payload when `seeded` holds the seed.
pub const fn payload_len_v2(party: PartyId, seeded: PartyId) -> usize {
    let head = uint_field_len(VERSION_V2 as u64)
        + uint_field_len(party.get() as u64)
        + len_field_len(REQUEST_ID_BYTES);
    if party.get() == seeded.get() {
        head + len_field_len(SEED_BYTES)
    } else {
        head + 2 * len_field_len(EYE_INNER)
    }
}

/// Ciphertext bytes of `party`'s version 2 payload (tag included).
pub const fn ciphertext_len_v2(party: PartyId, seeded: PartyId) -> usize {
    payload_len_v2(party, seeded) + TAG_BYTES
}

const fn ciphertext_lens(seeded: PartyId) -> [usize; PARTIES] {
    [
        ciphertext_len_v2(PartyId::ALL[0], seeded),
        ciphertext_len_v2(PartyId::ALL[1], seeded),
        ciphertext_len_v2(PartyId::ALL[2], seeded),
    ]
}

const fn envelope_len_seeded(meta: &RequestMeta, seeded: PartyId) -> usize {
    let ct = ciphertext_lens(seeded);
    let mut sealed = [0; PARTIES];
    let mut p = 0;
    while p < PARTIES {
        sealed[p] = sealed_inner_len_with(PartyId::ALL[p], HYBRID_ENCAPSULATED_KEY_BYTES, ct[p]);
        p += 1;
    }
    envelope_len_with(meta, VERSION_V2, &sealed)
}

/// Bytes of the version 2 envelope for `meta`.
pub const fn envelope_len_v2(meta: &RequestMeta) -> usize {
    envelope_len_seeded(meta, seeded_party(&meta.request_id))
}

/// The largest version 2 envelope: every varint at its longest, whichever party is seeded.
pub const MAX_ENVELOPE_LEN_V2: usize = {
    let meta = RequestMeta {
        request_id: RequestId([0; 16]),
        request_type: RequestType::Reset,
        timestamp_ms: u64::MAX,
        serial_id: u64::MAX,
        or_policy: true,
    };
    let mut max = 0;
    let mut p = 0;
    while p < PARTIES {
        let n = envelope_len_seeded(&meta, PartyId::ALL[p]);
        if n > max {
            max = n;
        }
        p += 1;
    }
    max
};

impl Version for V2 {
    const NUMBER: u32 = VERSION_V2;
    type EncappedKey = [u8; HYBRID_ENCAPSULATED_KEY_BYTES];
    fn encapped_key(bytes: &[u8]) -> Option<&Self::EncappedKey> {
        bytes.try_into().ok()
    }
    fn ciphertext_len(party: PartyId, request_id: &RequestId) -> usize {
        ciphertext_len_v2(party, seeded_party(request_id))
    }
    fn envelope_len(meta: &RequestMeta) -> usize {
        envelope_len_v2(meta)
    }
    const MAX_LEN: usize = MAX_ENVELOPE_LEN_V2;
    fn header(meta: &RequestMeta, orb_key: &[u8; KEY_BYTES]) -> [u8; HEADER_BYTES] {
        meta.header_v2(orb_key)
    }
    const BINDING: CiphertextBinding = CiphertextBinding::Tag;
}

/// Writes `party`'s version 2 payload except its share bytes, whose places it returns; the
/// seeded party's payload is complete (its seed written). `out` is exactly
/// `payload_len_v2(party, seeded)` long.
pub(crate) fn write_payload_layout_v2(
    out: &mut [u8],
    party: PartyId,
    seeded: PartyId,
    request_id: &RequestId,
    seed: &ShareSeed,
) -> Option<PayloadLayout> {
    let mut w = Writer::new(out);
    write_payload_head(&mut w, VERSION_V2, party, request_id);
    if party == seeded {
        w.bytes(6, &seed.0);
        debug_assert_eq!(w.pos, w.buf.len());
        None
    } else {
        Some(reserve_eyes(&mut w))
    }
}

#[cfg(test)]
mod tests;
