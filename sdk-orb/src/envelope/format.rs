//! Sizes, the header and the digest, the error type and the field layouts shared by sealing,
//! parsing and opening.

use sha2::{Digest as _, Sha256};

use crate::keys::KEY_BYTES;
use crate::pb::{len_field_len, uint_field_len, WireError, Writer};
use crate::shamir::{CodeShare, MaskShare};
use crate::{PartyId, RequestId, RequestType, PARTIES, PROTOCOL_VERSION};

/// Bytes of an Ed25519 signature.
pub const SIGNATURE_BYTES: usize = 64;
/// Bytes of an HPKE encapsulated key.
pub const ENCAPSULATED_KEY_BYTES: usize = 32;
/// Bytes of the ChaCha20-Poly1305 tag appended to each ciphertext.
pub const TAG_BYTES: usize = 16;
/// Bytes of a request id.
pub const REQUEST_ID_BYTES: usize = 16;
/// Domain separator of the envelope digest.
pub const DIGEST_DOMAIN: &[u8; 18] = b"ocelli/envelope/v1";
/// Domain separator of the HPKE info string.
pub const INFO_DOMAIN: &[u8; 17] = b"ocelli/payload/v1";
/// Bytes of the envelope header: the HPKE AAD and the start of the digest input.
pub const HEADER_BYTES: usize = DIGEST_DOMAIN.len() + 4 + REQUEST_ID_BYTES + 1 + 8 + 8 + 1 + 32;

pub(crate) const CODE_BYTES: usize = CodeShare::BYTES;
pub(crate) const MASK_BYTES: usize = MaskShare::BYTES;
pub(crate) const EYE_INNER: usize = len_field_len(CODE_BYTES) + len_field_len(MASK_BYTES);

/// Why an envelope or payload was rejected, or could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EnvelopeError {
    /// Not a canonical protobuf message of the expected shape.
    Malformed(&'static str),
    /// A required field is absent.
    MissingField(&'static str),
    /// The envelope is longer than any valid envelope ([`MAX_ENVELOPE_LEN`]).
    Oversized {
        /// The most allowed.
        limit: usize,
        /// Bytes found.
        actual: usize,
    },
    /// A field has the wrong length.
    Length {
        /// The field.
        field: &'static str,
        /// Bytes expected.
        expected: usize,
        /// Bytes found.
        actual: usize,
    },
    /// A share vector in a payload has the wrong length.
    ShareLength {
        /// The vector: `left.code`, `left.mask`, `right.code` or `right.mask`.
        field: &'static str,
        /// Bytes expected.
        expected: usize,
        /// Bytes found.
        actual: usize,
    },
    /// Envelope or payload version is not [`PROTOCOL_VERSION`].
    UnsupportedVersion(u64),
    /// The request type is not one of [`RequestType`].
    UnknownRequestType(u64),
    /// A serial id is given for a request type without a target, or missing for one with.
    SerialId,
    /// Not exactly three payloads for parties 0, 1, 2 in order.
    PayloadParties,
    /// The signature does not verify under the envelope's orb key (or the key is invalid).
    Signature,
    /// HPKE could not open the payload: wrong key, wrong party, or tampered bytes.
    Decryption,
    /// The decrypted payload names another party.
    PayloadParty {
        /// The party opening it.
        expected: u8,
        /// The party it names.
        actual: u64,
    },
    /// The decrypted payload names another request id.
    PayloadRequestId,
    /// HPKE refused to seal (a node public key of small order).
    Encryption,
    /// The caller's buffer is too small (misuse, not bad input).
    BufferTooSmall {
        /// Bytes needed.
        needed: usize,
    },
}

impl core::fmt::Display for EnvelopeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            EnvelopeError::Malformed(what) => write!(f, "malformed: {what}"),
            EnvelopeError::MissingField(field) => write!(f, "missing field {field}"),
            EnvelopeError::Oversized { limit, actual } => {
                write!(f, "envelope has {actual} bytes, expected {limit}")
            }
            EnvelopeError::Length {
                field,
                expected,
                actual,
            }
            | EnvelopeError::ShareLength {
                field,
                expected,
                actual,
            } => write!(f, "{field} has {actual} bytes, expected {expected}"),
            EnvelopeError::UnsupportedVersion(v) => write!(f, "unsupported version {v}"),
            EnvelopeError::UnknownRequestType(t) => write!(f, "unknown request type {t}"),
            EnvelopeError::SerialId => f.write_str(
                "serial id must be set for deletion, reauth and reset, and only for them",
            ),
            EnvelopeError::PayloadParties => {
                f.write_str("expected exactly three payloads for parties 0, 1, 2 in order")
            }
            EnvelopeError::Signature => f.write_str("signature does not verify"),
            EnvelopeError::Decryption => f.write_str("payload does not decrypt"),
            EnvelopeError::PayloadParty { expected, actual } => {
                write!(f, "payload for party {actual} opened by party {expected}")
            }
            EnvelopeError::PayloadRequestId => {
                f.write_str("payload request id differs from the envelope's")
            }
            EnvelopeError::Encryption => f.write_str("HPKE sealing failed"),
            EnvelopeError::BufferTooSmall { needed } => {
                write!(f, "buffer too small: {needed} bytes needed")
            }
        }
    }
}

impl core::error::Error for EnvelopeError {}

impl From<WireError> for EnvelopeError {
    fn from(e: WireError) -> EnvelopeError {
        EnvelopeError::Malformed(e.describe())
    }
}

/// What the orb asks for, besides the irises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestMeta {
    /// Fresh random id.
    pub request_id: RequestId,
    /// What to do.
    pub request_type: RequestType,
    /// Capture time, milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
    /// Target serial id for deletion, reauth and reset; 0 otherwise.
    pub serial_id: u64,
    /// Match if either eye matches, instead of both.
    pub or_policy: bool,
}

impl RequestMeta {
    /// Checks the serial id against the request type.
    ///
    /// # Errors
    /// [`EnvelopeError::SerialId`].
    pub fn validate(&self) -> Result<(), EnvelopeError> {
        if self.request_type.has_target() == (self.serial_id != 0) {
            Ok(())
        } else {
            Err(EnvelopeError::SerialId)
        }
    }

    /// The header bytes: HPKE AAD and digest prefix.
    pub fn header(&self, orb_key: &[u8; KEY_BYTES]) -> [u8; HEADER_BYTES] {
        self.header_with(DIGEST_DOMAIN, PROTOCOL_VERSION, orb_key)
    }

    /// The header of envelope `version`, whose digest domain is `domain` (as long as
    /// [`DIGEST_DOMAIN`]).
    pub(crate) fn header_with(
        &self,
        domain: &[u8; DIGEST_DOMAIN.len()],
        version: u32,
        orb_key: &[u8; KEY_BYTES],
    ) -> [u8; HEADER_BYTES] {
        let mut h = [0u8; HEADER_BYTES];
        let mut pos = 0;
        for part in [
            &domain[..],
            &version.to_be_bytes(),
            &self.request_id.0,
            &[self.request_type as u8],
            &self.timestamp_ms.to_be_bytes(),
            &self.serial_id.to_be_bytes(),
            &[self.or_policy as u8],
            orb_key,
        ] {
            h[pos..pos + part.len()].copy_from_slice(part);
            pos += part.len();
        }
        h
    }
}

/// SHA-256 digest identifying an envelope: what the orb signs and the nodes agree on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EnvelopeDigest(pub [u8; 32]);

/// The HPKE info string for `party`'s payload of `request_id`.
pub fn hpke_info(party: PartyId, request_id: &RequestId) -> [u8; INFO_DOMAIN.len() + 17] {
    info_with(INFO_DOMAIN, party, request_id)
}

/// The info string under `domain` (as long as [`INFO_DOMAIN`]).
pub(crate) fn info_with(
    domain: &[u8; INFO_DOMAIN.len()],
    party: PartyId,
    request_id: &RequestId,
) -> [u8; INFO_DOMAIN.len() + 17] {
    let mut info = [0u8; INFO_DOMAIN.len() + 17];
    info[..INFO_DOMAIN.len()].copy_from_slice(domain);
    info[INFO_DOMAIN.len()] = party.get();
    info[INFO_DOMAIN.len() + 1..].copy_from_slice(&request_id.0);
    info
}

/// What the digest takes of each ciphertext (tag included).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CiphertextBinding {
    /// Every byte (version 1).
    Whole,
    /// Its length and its AEAD tag (version 2). A ciphertext other than the one sealed with
    /// that tag opens only with a forged tag: only the orb and the recipient node, which hold
    /// the payload's key, could make one, and the recipient alone ever opens it.
    Tag,
}

/// SHA-256 over the header and, per party, its number, encapsulated key, ciphertext length
/// (32-bit big-endian) and the ciphertext as `binding` takes it.
pub(crate) fn digest(
    header: &[u8; HEADER_BYTES],
    sealed: [(&[u8], &[u8]); PARTIES],
    binding: CiphertextBinding,
) -> EnvelopeDigest {
    let mut h = Sha256::new();
    h.update(header);
    for (party, (enc, ct)) in sealed.iter().enumerate() {
        h.update([party as u8]);
        h.update(enc);
        h.update((ct.len() as u32).to_be_bytes());
        h.update(match binding {
            CiphertextBinding::Whole => ct,
            CiphertextBinding::Tag => &ct[ct.len().saturating_sub(TAG_BYTES)..],
        });
    }
    EnvelopeDigest(h.finalize().into())
}

/// The first `n` bytes of a caller's output buffer.
pub(crate) fn first(out: &mut [u8], n: usize) -> Result<&mut [u8], EnvelopeError> {
    out.get_mut(..n)
        .ok_or(EnvelopeError::BufferTooSmall { needed: n })
}

/// Plaintext bytes of `party`'s payload.
pub const fn payload_len(party: PartyId) -> usize {
    uint_field_len(PROTOCOL_VERSION as u64)
        + uint_field_len(party.get() as u64)
        + len_field_len(REQUEST_ID_BYTES)
        + 2 * len_field_len(EYE_INNER)
}

/// Ciphertext bytes of `party`'s payload (tag included).
pub const fn ciphertext_len(party: PartyId) -> usize {
    payload_len(party) + TAG_BYTES
}

pub(crate) const fn sealed_inner_len(party: PartyId) -> usize {
    sealed_inner_len_with(party, ENCAPSULATED_KEY_BYTES, ciphertext_len(party))
}

pub(crate) const fn sealed_inner_len_with(party: PartyId, enc_len: usize, ct_len: usize) -> usize {
    uint_field_len(party.get() as u64) + len_field_len(enc_len) + len_field_len(ct_len)
}

/// Bytes of the envelope for `meta`.
pub const fn envelope_len(meta: &RequestMeta) -> usize {
    let mut sealed = [0; PARTIES];
    let mut p = 0;
    while p < PARTIES {
        sealed[p] = sealed_inner_len(PartyId::ALL[p]);
        p += 1;
    }
    envelope_len_with(meta, PROTOCOL_VERSION, &sealed)
}

/// Bytes of an envelope of `version` for `meta` whose sealed payload messages have
/// `sealed[party]` bytes of content.
pub(crate) const fn envelope_len_with(
    meta: &RequestMeta,
    version: u32,
    sealed: &[usize; PARTIES],
) -> usize {
    let mut n = uint_field_len(version as u64)
        + len_field_len(REQUEST_ID_BYTES)
        + uint_field_len(meta.request_type as u64)
        + uint_field_len(meta.timestamp_ms)
        + uint_field_len(meta.serial_id)
        + uint_field_len(meta.or_policy as u64)
        + len_field_len(KEY_BYTES)
        + len_field_len(SIGNATURE_BYTES);
    let mut p = 0;
    while p < PARTIES {
        n += len_field_len(sealed[p]);
        p += 1;
    }
    n
}

/// The largest envelope: every varint at its longest.
pub const MAX_ENVELOPE_LEN: usize = envelope_len(&RequestMeta {
    request_id: RequestId([0; 16]),
    request_type: RequestType::Reset,
    timestamp_ms: u64::MAX,
    serial_id: u64::MAX,
    or_policy: true,
});

/// Where the variable parts of an envelope go.
pub(crate) struct EnvelopeLayout {
    pub(crate) enc: [usize; PARTIES],
    pub(crate) ct: [usize; PARTIES],
    pub(crate) sig: usize,
}

/// Writes every field of an envelope of `version` except the encapsulated keys (`enc_len`
/// bytes each), ciphertexts (`ct_len[party]` bytes) and signature, whose places it reserves.
/// `out` is exactly the envelope's length.
pub(crate) fn write_envelope_layout_with(
    out: &mut [u8],
    meta: &RequestMeta,
    orb_key: &[u8; KEY_BYTES],
    version: u32,
    enc_len: usize,
    ct_len: [usize; PARTIES],
) -> EnvelopeLayout {
    let mut w = Writer::new(out);
    w.uint(1, version as u64);
    w.bytes(2, &meta.request_id.0);
    w.uint(3, meta.request_type as u64);
    w.uint(4, meta.timestamp_ms);
    w.uint(5, meta.serial_id);
    w.uint(6, meta.or_policy as u64);
    w.bytes(7, orb_key);
    let mut enc = [0; PARTIES];
    let mut ct = [0; PARTIES];
    for party in PartyId::ALL {
        let p = party.index();
        w.len_prefix(8, sealed_inner_len_with(party, enc_len, ct_len[p]));
        w.uint(1, party.get() as u64);
        enc[p] = w.reserve(2, enc_len);
        ct[p] = w.reserve(3, ct_len[p]);
    }
    let sig = w.reserve(9, SIGNATURE_BYTES);
    debug_assert_eq!(w.pos, w.buf.len());
    EnvelopeLayout { enc, ct, sig }
}

/// Where the shares go inside a payload: `[left, right]` code and mask offsets.
pub(crate) struct PayloadLayout {
    pub(crate) code: [usize; 2],
    pub(crate) mask: [usize; 2],
}

/// Writes a payload's fields except the share bytes, whose places it reserves. `out` is
/// exactly `payload_len(party)` long.
pub(crate) fn write_payload_layout(
    out: &mut [u8],
    party: PartyId,
    request_id: &RequestId,
) -> PayloadLayout {
    let mut w = Writer::new(out);
    write_payload_head(&mut w, PROTOCOL_VERSION, party, request_id);
    reserve_eyes(&mut w)
}

/// A payload's version, party and request id fields.
pub(crate) fn write_payload_head(
    w: &mut Writer<'_>,
    version: u32,
    party: PartyId,
    request_id: &RequestId,
) {
    w.uint(1, version as u64);
    w.uint(2, party.get() as u64);
    w.bytes(3, &request_id.0);
}

/// Reserves the two eyes' share fields, which end the payload.
pub(crate) fn reserve_eyes(w: &mut Writer<'_>) -> PayloadLayout {
    let mut code = [0; 2];
    let mut mask = [0; 2];
    for (eye, field) in [4u8, 5].into_iter().enumerate() {
        w.len_prefix(field, EYE_INNER);
        code[eye] = w.reserve(1, CODE_BYTES);
        mask[eye] = w.reserve(2, MASK_BYTES);
    }
    debug_assert_eq!(w.pos, w.buf.len());
    PayloadLayout { code, mask }
}
