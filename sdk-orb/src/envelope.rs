//! The envelope: per-party payloads sealed with HPKE, signed by the orb.
//!
//! Sealing (orb): [`seal_envelope`] shares both eyes straight into the three payload regions
//! of the caller's buffer, seals each region in place to its node's X25519 key (RFC 9180 base
//! mode, DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305) and signs the envelope
//! digest with the orb's Ed25519 key. No allocator; nothing secret outlives the call except
//! inside the ciphertexts.
//!
//! Opening (node, auditor): [`EnvelopeView::parse`] (structure only), then
//! [`EnvelopeView::verify_signature`], then [`EnvelopeView::open_into`] for one party.
//!
//! Bindings: the HPKE info string is `"ocelli/payload/v1" || party id || request id`; the AAD
//! is the envelope header (version, request id, type, timestamp, serial id, policy, orb key);
//! the digest covers the header and all three encapsulated keys and ciphertexts.

use ed25519_dalek::{Signature, Signer as _, VerifyingKey};
use hpke::aead::{AeadTag, ChaCha20Poly1305};
use hpke::kdf::HkdfSha256;
use hpke::{Deserializable, OpModeR, OpModeS, Serializable};
use rand_core::{CryptoRng, RngCore};
use sha2::{Digest as _, Sha256};
use zeroize::Zeroize;

use crate::keys::{Kem, NodePublicKeys, NodeSecretKey, OrbSigningKey, KEY_BYTES};
use crate::pb::{len_field_len, uint_field_len, Reader, Value, WireError, Writer};
use crate::shamir::{code_coefs, mask_coefs, share_with_sink, CodeShare, MaskShare, PartyShares};
use crate::template::IrisTemplate;
use crate::{PartyId, RequestId, RequestType, CODE_COEFS, MASK_COEFS, PARTIES, PROTOCOL_VERSION};

/// Bytes of an Ed25519 signature.
pub const SIGNATURE_BYTES: usize = 64;
/// Bytes of an HPKE encapsulated key.
pub const ENCAPSULATED_KEY_BYTES: usize = 32;
/// Bytes of the ChaCha20-Poly1305 tag appended to each ciphertext.
pub const TAG_BYTES: usize = 16;
/// Bytes of a request id.
pub const REQUEST_ID_BYTES: usize = 16;
/// Domain separator of the envelope digest.
pub const DIGEST_DOMAIN: &[u8] = b"ocelli/envelope/v1";
/// Domain separator of the HPKE info string.
pub const INFO_DOMAIN: &[u8] = b"ocelli/payload/v1";
/// Bytes of the envelope header: the HPKE AAD and the start of the digest input.
pub const HEADER_BYTES: usize = DIGEST_DOMAIN.len() + 4 + REQUEST_ID_BYTES + 1 + 8 + 8 + 1 + 32;

const CODE_BYTES: usize = CodeShare::BYTES;
const MASK_BYTES: usize = MaskShare::BYTES;
const EYE_INNER: usize = len_field_len(CODE_BYTES) + len_field_len(MASK_BYTES);

/// Why an envelope or payload was rejected, or could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EnvelopeError {
    /// Not a canonical protobuf message of the expected shape.
    Malformed(&'static str),
    /// A required field is absent.
    MissingField(&'static str),
    /// A field has the wrong length.
    Length {
        /// The field.
        field: &'static str,
        /// Bytes expected (for `envelope`: the most allowed).
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
            EnvelopeError::Length {
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
        let mut h = [0u8; HEADER_BYTES];
        let mut pos = 0;
        for part in [
            DIGEST_DOMAIN,
            &PROTOCOL_VERSION.to_be_bytes(),
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
    let mut info = [0u8; INFO_DOMAIN.len() + 17];
    info[..INFO_DOMAIN.len()].copy_from_slice(INFO_DOMAIN);
    info[INFO_DOMAIN.len()] = party.get();
    info[INFO_DOMAIN.len() + 1..].copy_from_slice(&request_id.0);
    info
}

fn digest(header: &[u8; HEADER_BYTES], sealed: [(&[u8], &[u8]); PARTIES]) -> EnvelopeDigest {
    let mut h = Sha256::new();
    h.update(header);
    for (party, (enc, ct)) in sealed.iter().enumerate() {
        h.update([party as u8]);
        h.update(enc);
        h.update((ct.len() as u32).to_be_bytes());
        h.update(ct);
    }
    EnvelopeDigest(h.finalize().into())
}

/// The first `n` bytes of a caller's output buffer.
fn first(out: &mut [u8], n: usize) -> Result<&mut [u8], EnvelopeError> {
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

const fn sealed_inner_len(party: PartyId) -> usize {
    uint_field_len(party.get() as u64)
        + len_field_len(ENCAPSULATED_KEY_BYTES)
        + len_field_len(ciphertext_len(party))
}

/// Bytes of the envelope for `meta`.
pub const fn envelope_len(meta: &RequestMeta) -> usize {
    let mut n = uint_field_len(PROTOCOL_VERSION as u64)
        + len_field_len(REQUEST_ID_BYTES)
        + uint_field_len(meta.request_type as u64)
        + uint_field_len(meta.timestamp_ms)
        + uint_field_len(meta.serial_id)
        + uint_field_len(meta.or_policy as u64)
        + len_field_len(KEY_BYTES)
        + len_field_len(SIGNATURE_BYTES);
    let mut p = 0;
    while p < PARTIES {
        n += len_field_len(sealed_inner_len(PartyId::ALL[p]));
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
struct EnvelopeLayout {
    enc: [usize; PARTIES],
    ct: [usize; PARTIES],
    sig: usize,
}

/// Writes every envelope field except the encapsulated keys, ciphertexts and signature,
/// whose places it reserves. `out` is exactly `envelope_len(meta)` long.
fn write_envelope_layout(
    out: &mut [u8],
    meta: &RequestMeta,
    orb_key: &[u8; KEY_BYTES],
) -> EnvelopeLayout {
    let mut w = Writer::new(out);
    w.uint(1, PROTOCOL_VERSION as u64);
    w.bytes(2, &meta.request_id.0);
    w.uint(3, meta.request_type as u64);
    w.uint(4, meta.timestamp_ms);
    w.uint(5, meta.serial_id);
    w.uint(6, meta.or_policy as u64);
    w.bytes(7, orb_key);
    let mut enc = [0; PARTIES];
    let mut ct = [0; PARTIES];
    for party in PartyId::ALL {
        w.len_prefix(8, sealed_inner_len(party));
        w.uint(1, party.get() as u64);
        enc[party.index()] = w.reserve(2, ENCAPSULATED_KEY_BYTES);
        ct[party.index()] = w.reserve(3, ciphertext_len(party));
    }
    let sig = w.reserve(9, SIGNATURE_BYTES);
    debug_assert_eq!(w.pos, w.buf.len());
    EnvelopeLayout { enc, ct, sig }
}

/// Where the shares go inside a payload: `[left, right]` code and mask offsets.
struct PayloadLayout {
    code: [usize; 2],
    mask: [usize; 2],
}

/// Writes a payload's fields except the share bytes, whose places it reserves. `out` is
/// exactly `payload_len(party)` long.
fn write_payload_layout(out: &mut [u8], party: PartyId, request_id: &RequestId) -> PayloadLayout {
    let mut w = Writer::new(out);
    w.uint(1, PROTOCOL_VERSION as u64);
    w.uint(2, party.get() as u64);
    w.bytes(3, &request_id.0);
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
    let layout = write_envelope_layout(out, meta, &orb_key);

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
    let mut code_plain = [0u16; CODE_COEFS];
    let mut mask_plain = [0u16; MASK_COEFS];
    for (eye, template) in [left, right].into_iter().enumerate() {
        code_coefs(template, &mut code_plain);
        share_with_sink(rng, &code_plain, |e, shares| {
            write_element(out, &code_at[eye], e, shares)
        });
        mask_coefs(template, &mut mask_plain);
        share_with_sink(rng, &mask_plain, |e, shares| {
            write_element(out, &mask_at[eye], e, shares)
        });
    }
    code_plain.zeroize();
    mask_plain.zeroize();

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
    let n = envelope_len(meta);
    let out = first(out, n)?;
    let orb_key = orb.verifying_key().to_bytes();
    let layout = write_envelope_layout(out, meta, &orb_key);
    for (party, plaintext) in PartyId::ALL.into_iter().zip(plaintexts) {
        let len = payload_len(party);
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
    seal_and_sign(rng, meta, nodes, orb, out, &layout)?;
    Ok(n)
}

/// Seals the three plaintext regions of `out` in place and signs the envelope.
fn seal_and_sign<R: RngCore + CryptoRng>(
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
    let region = |p: usize| {
        let e = layout.enc[p];
        let c = layout.ct[p];
        (
            &out[e..e + ENCAPSULATED_KEY_BYTES],
            &out[c..c + ciphertext_len(PartyId::ALL[p])],
        )
    };
    let d = digest(&header, [region(0), region(1), region(2)]);
    let signature = orb.0.sign(&d.0);
    out[layout.sig..layout.sig + SIGNATURE_BYTES].copy_from_slice(&signature.to_bytes());
    Ok(())
}

fn write_element(
    out: &mut [u8],
    base: &[usize; PARTIES],
    element: usize,
    shares: &[crate::ring::GaloisRingElement; PARTIES],
) {
    for (b, s) in base.iter().zip(shares) {
        let at = b + 8 * element;
        for (dst, c) in out[at..at + 8].chunks_exact_mut(2).zip(s.0) {
            dst.copy_from_slice(&c.to_le_bytes());
        }
    }
}

/// One party's sealed payload inside a parsed envelope.
#[derive(Clone, Copy, Debug)]
pub struct SealedPayloadView<'a> {
    /// HPKE encapsulated key.
    pub encapsulated_key: &'a [u8; ENCAPSULATED_KEY_BYTES],
    /// Ciphertext with the tag appended.
    pub ciphertext: &'a [u8],
}

/// A structurally valid envelope, borrowed from its bytes. Not yet authenticated: call
/// [`EnvelopeView::verify_signature`] before trusting anything in it.
#[derive(Clone, Copy, Debug)]
pub struct EnvelopeView<'a> {
    meta: RequestMeta,
    orb_key: [u8; KEY_BYTES],
    payloads: [SealedPayloadView<'a>; PARTIES],
    signature: [u8; SIGNATURE_BYTES],
}

fn fixed<'a, const N: usize>(
    v: Value<'a>,
    field: &'static str,
) -> Result<&'a [u8; N], EnvelopeError> {
    let b = v.bytes()?;
    b.try_into().map_err(|_| EnvelopeError::Length {
        field,
        expected: N,
        actual: b.len(),
    })
}

fn parse_sealed(bytes: &[u8], position: usize) -> Result<SealedPayloadView<'_>, EnvelopeError> {
    let mut r = Reader::new(bytes, &[]);
    let mut party = 0u64;
    let mut enc = None;
    let mut ct = None;
    while let Some((field, v)) = r.next(3)? {
        match field {
            // Canonical proto3 omits a zero scalar: an explicit zero would give the same
            // envelope a second encoding.
            1 => {
                party = match v.varint()? {
                    0 => return Err(EnvelopeError::Malformed("explicit zero party_id")),
                    p => p,
                }
            }
            2 => enc = Some(fixed::<ENCAPSULATED_KEY_BYTES>(v, "encapsulated_key")?),
            _ => ct = Some(v.bytes()?),
        }
    }
    if party != position as u64 {
        return Err(EnvelopeError::PayloadParties);
    }
    let encapsulated_key = enc.ok_or(EnvelopeError::MissingField("encapsulated_key"))?;
    let ciphertext = ct.ok_or(EnvelopeError::MissingField("ciphertext"))?;
    let expected = ciphertext_len(PartyId::ALL[position]);
    if ciphertext.len() != expected {
        return Err(EnvelopeError::Length {
            field: "ciphertext",
            expected,
            actual: ciphertext.len(),
        });
    }
    Ok(SealedPayloadView {
        encapsulated_key,
        ciphertext,
    })
}

impl<'a> EnvelopeView<'a> {
    /// Decodes an envelope and checks its structure: canonical encoding, version, lengths,
    /// request type, serial id, three payloads in party order.
    ///
    /// # Errors
    /// The first problem found, as an [`EnvelopeError`].
    pub fn parse(bytes: &'a [u8]) -> Result<EnvelopeView<'a>, EnvelopeError> {
        if bytes.len() > MAX_ENVELOPE_LEN {
            return Err(EnvelopeError::Length {
                field: "envelope",
                expected: MAX_ENVELOPE_LEN,
                actual: bytes.len(),
            });
        }
        let mut r = Reader::new(bytes, &[8]);
        let mut version = None;
        let mut request_id = None;
        let mut request_type = None;
        let mut timestamp_ms = 0;
        let mut serial_id = 0;
        let mut or_policy = false;
        let mut orb_key = None;
        let mut payloads: [Option<SealedPayloadView<'a>>; PARTIES] = [None; PARTIES];
        let mut count = 0;
        let mut signature = None;
        while let Some((field, v)) = r.next(9)? {
            match field {
                1 => version = Some(v.varint()?),
                2 => request_id = Some(*fixed::<REQUEST_ID_BYTES>(v, "request_id")?),
                3 => {
                    let t = v.varint()?;
                    request_type = Some(
                        RequestType::from_wire(t).ok_or(EnvelopeError::UnknownRequestType(t))?,
                    );
                }
                4 => timestamp_ms = v.varint()?,
                5 => {
                    serial_id = match v.varint()? {
                        0 => return Err(EnvelopeError::Malformed("explicit zero serial_id")),
                        id => id,
                    }
                }
                6 => {
                    or_policy = match v.varint()? {
                        1 => true,
                        _ => return Err(EnvelopeError::Malformed("or_policy is not a bool")),
                    }
                }
                7 => orb_key = Some(*fixed::<KEY_BYTES>(v, "orb_key")?),
                8 => {
                    let slot = payloads
                        .get_mut(count)
                        .ok_or(EnvelopeError::PayloadParties)?;
                    *slot = Some(parse_sealed(v.bytes()?, count)?);
                    count += 1;
                }
                _ => signature = Some(*fixed::<SIGNATURE_BYTES>(v, "signature")?),
            }
        }
        match version {
            Some(v) if v == PROTOCOL_VERSION as u64 => {}
            Some(v) => return Err(EnvelopeError::UnsupportedVersion(v)),
            None => return Err(EnvelopeError::MissingField("version")),
        }
        let meta = RequestMeta {
            request_id: RequestId(request_id.ok_or(EnvelopeError::MissingField("request_id"))?),
            request_type: request_type.ok_or(EnvelopeError::MissingField("request_type"))?,
            timestamp_ms,
            serial_id,
            or_policy,
        };
        if timestamp_ms == 0 {
            return Err(EnvelopeError::MissingField("timestamp_ms"));
        }
        meta.validate()?;
        let [Some(p0), Some(p1), Some(p2)] = payloads else {
            return Err(EnvelopeError::PayloadParties);
        };
        Ok(EnvelopeView {
            meta,
            orb_key: orb_key.ok_or(EnvelopeError::MissingField("orb_key"))?,
            payloads: [p0, p1, p2],
            signature: signature.ok_or(EnvelopeError::MissingField("signature"))?,
        })
    }

    /// The request fields.
    pub fn meta(&self) -> &RequestMeta {
        &self.meta
    }

    /// The request id.
    pub fn request_id(&self) -> RequestId {
        self.meta.request_id
    }

    /// The request type.
    pub fn request_type(&self) -> RequestType {
        self.meta.request_type
    }

    /// Capture time, milliseconds since the Unix epoch.
    pub fn timestamp_ms(&self) -> u64 {
        self.meta.timestamp_ms
    }

    /// Target serial id, 0 if none.
    pub fn serial_id(&self) -> u64 {
        self.meta.serial_id
    }

    /// Whether one matching eye suffices.
    pub fn or_policy(&self) -> bool {
        self.meta.or_policy
    }

    /// The orb's Ed25519 key as carried in the envelope (check it against an allow-list).
    pub fn orb_key(&self) -> [u8; KEY_BYTES] {
        self.orb_key
    }

    /// The sealed payload of `party`.
    pub fn payload(&self, party: PartyId) -> SealedPayloadView<'a> {
        self.payloads[party.index()]
    }

    /// The signature bytes.
    pub fn signature(&self) -> [u8; SIGNATURE_BYTES] {
        self.signature
    }

    /// The digest the orb signed; nodes agree on requests by it.
    pub fn digest(&self) -> EnvelopeDigest {
        let p = |i: usize| {
            (
                &self.payloads[i].encapsulated_key[..],
                self.payloads[i].ciphertext,
            )
        };
        digest(&self.meta.header(&self.orb_key), [p(0), p(1), p(2)])
    }

    /// Verifies the orb's signature over the digest (strict Ed25519: no small-order keys,
    /// canonical signatures only).
    ///
    /// # Errors
    /// [`EnvelopeError::Signature`].
    pub fn verify_signature(&self) -> Result<(), EnvelopeError> {
        let key = VerifyingKey::from_bytes(&self.orb_key).map_err(|_| EnvelopeError::Signature)?;
        let sig = Signature::from_bytes(&self.signature);
        key.verify_strict(&self.digest().0, &sig)
            .map_err(|_| EnvelopeError::Signature)
    }

    /// Re-encodes the envelope (canonically: for an envelope that parsed, the same bytes).
    ///
    /// # Errors
    /// [`EnvelopeError::BufferTooSmall`].
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EnvelopeError> {
        let n = envelope_len(&self.meta);
        let out = first(out, n)?;
        let layout = write_envelope_layout(out, &self.meta, &self.orb_key);
        for (p, payload) in self.payloads.iter().enumerate() {
            let e = layout.enc[p];
            out[e..e + ENCAPSULATED_KEY_BYTES].copy_from_slice(payload.encapsulated_key);
            let c = layout.ct[p];
            out[c..c + payload.ciphertext.len()].copy_from_slice(payload.ciphertext);
        }
        out[layout.sig..layout.sig + SIGNATURE_BYTES].copy_from_slice(&self.signature);
        Ok(n)
    }

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
        let len = payload_len(party);
        let buf = scratch
            .get_mut(..len)
            .ok_or(EnvelopeError::BufferTooSmall {
                needed: ciphertext_len(party),
            })?;
        buf.copy_from_slice(&sealed.ciphertext[..len]);
        let result = open_in_place(self, party, key, sealed, buf)
            .and_then(|()| decode_payload(buf, party, &self.meta.request_id, out));
        buf.zeroize();
        if result.is_err() {
            out.zeroize();
        }
        result
    }
}

fn open_in_place(
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
/// [`EnvelopeError::Malformed`], [`EnvelopeError::MissingField`], [`EnvelopeError::Length`]
/// for a share of the wrong size, [`EnvelopeError::UnsupportedVersion`],
/// [`EnvelopeError::PayloadParty`], [`EnvelopeError::PayloadRequestId`].
pub fn decode_payload(
    bytes: &[u8],
    party: PartyId,
    request_id: &RequestId,
    out: &mut PartyShares,
) -> Result<(), EnvelopeError> {
    let mut r = Reader::new(bytes, &[]);
    let mut version = None;
    let mut payload_party = 0;
    let mut rid = None;
    let mut eyes = [false; 2];
    while let Some((field, v)) = r.next(5)? {
        match field {
            1 => version = Some(v.varint()?),
            2 => {
                payload_party = match v.varint()? {
                    0 => return Err(EnvelopeError::Malformed("explicit zero party_id")),
                    p => p,
                }
            }
            3 => rid = Some(*fixed::<REQUEST_ID_BYTES>(v, "payload request_id")?),
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
        Some(v) if v == PROTOCOL_VERSION as u64 => {}
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
    if !eyes[0] {
        return Err(EnvelopeError::MissingField("left"));
    }
    if !eyes[1] {
        return Err(EnvelopeError::MissingField("right"));
    }
    Ok(())
}

fn decode_eye(
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
        result.map_err(|actual| EnvelopeError::Length {
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

#[cfg(test)]
mod tests;
