//! Parsing an envelope's structure, its digest and signature, and re-encoding it.

use ed25519_dalek::{Signature, VerifyingKey};

use crate::keys::KEY_BYTES;
use crate::pb::{Reader, Value};
use crate::{PartyId, RequestId, RequestType, PARTIES, PROTOCOL_VERSION};

use super::format::*;

/// An envelope version: its number, KEM and lengths. Implemented by [`V1`] and [`V2`] only.
pub trait Version: Copy + core::fmt::Debug + sealed::Sealed {
    /// The version number carried in the envelope and its payloads.
    const NUMBER: u32;
    /// The KEM's encapsulated key.
    type EncappedKey: Copy + core::fmt::Debug + AsRef<[u8]> + 'static;
    /// The encapsulated key in `bytes`, if they have its length.
    fn encapped_key(bytes: &[u8]) -> Option<&Self::EncappedKey>;
    /// Ciphertext bytes (tag included) of `party`'s payload.
    fn ciphertext_len(party: PartyId, request_id: &RequestId) -> usize;
    /// Bytes of the envelope for `meta`.
    fn envelope_len(meta: &RequestMeta) -> usize;
    /// The largest envelope of this version.
    const MAX_LEN: usize;
    /// The header (HPKE AAD and digest prefix).
    fn header(meta: &RequestMeta, orb_key: &[u8; KEY_BYTES]) -> [u8; HEADER_BYTES];
    /// What the digest takes of each ciphertext.
    const BINDING: CiphertextBinding;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::V1 {}
    impl Sealed for super::V2 {}
}

/// The layout of a version `V` envelope for `meta`: every field but the sealed parts written.
pub(crate) fn write_layout<V: Version>(
    out: &mut [u8],
    meta: &RequestMeta,
    orb_key: &[u8; KEY_BYTES],
) -> EnvelopeLayout {
    let ct = PartyId::ALL.map(|p| V::ciphertext_len(p, &meta.request_id));
    let enc = core::mem::size_of::<V::EncappedKey>();
    write_envelope_layout_with(out, meta, orb_key, V::NUMBER, enc, ct)
}

/// The digest of the sealed version `V` envelope in `out`, whose layout is `layout`, under
/// `header`: what the orb signs.
pub(crate) fn sealed_digest<V: Version>(
    out: &[u8],
    layout: &EnvelopeLayout,
    request_id: &RequestId,
    header: &[u8; HEADER_BYTES],
) -> EnvelopeDigest {
    let enc = core::mem::size_of::<V::EncappedKey>();
    let region = |p: PartyId| {
        let (e, c) = (layout.enc[p.index()], layout.ct[p.index()]);
        (
            &out[e..e + enc],
            &out[c..c + V::ciphertext_len(p, request_id)],
        )
    };
    digest(header, PartyId::ALL.map(region), V::BINDING)
}

/// Envelope version 1: X25519 HPKE, every party's shares in its payload.
#[derive(Clone, Copy, Debug)]
pub struct V1;

/// Envelope version 2: X-Wing HPKE, one party's shares as a seed (see [`super::v2`]).
#[derive(Clone, Copy, Debug)]
pub struct V2;

impl Version for V1 {
    const NUMBER: u32 = PROTOCOL_VERSION;
    type EncappedKey = [u8; ENCAPSULATED_KEY_BYTES];
    fn encapped_key(bytes: &[u8]) -> Option<&Self::EncappedKey> {
        bytes.try_into().ok()
    }
    fn ciphertext_len(party: PartyId, _: &RequestId) -> usize {
        ciphertext_len(party)
    }
    fn envelope_len(meta: &RequestMeta) -> usize {
        envelope_len(meta)
    }
    const MAX_LEN: usize = MAX_ENVELOPE_LEN;
    fn header(meta: &RequestMeta, orb_key: &[u8; KEY_BYTES]) -> [u8; HEADER_BYTES] {
        meta.header(orb_key)
    }
    const BINDING: CiphertextBinding = CiphertextBinding::Whole;
}

/// One party's sealed payload inside a parsed envelope.
#[derive(Clone, Copy, Debug)]
pub struct SealedPayloadView<'a, V: Version = V1> {
    /// HPKE encapsulated key.
    pub encapsulated_key: &'a V::EncappedKey,
    /// Ciphertext with the tag appended.
    pub ciphertext: &'a [u8],
}

/// A structurally valid envelope of version `V`, borrowed from its bytes. Not yet
/// authenticated: call [`EnvelopeView::verify_signature`] before trusting anything in it.
#[derive(Clone, Copy, Debug)]
pub struct EnvelopeView<'a, V: Version = V1> {
    pub(crate) meta: RequestMeta,
    pub(crate) orb_key: [u8; KEY_BYTES],
    pub(crate) payloads: [SealedPayloadView<'a, V>; PARTIES],
    pub(crate) signature: [u8; SIGNATURE_BYTES],
}

/// The version field of an envelope, read without parsing the rest: which parser to use.
///
/// # Errors
/// [`EnvelopeError::Malformed`] if the bytes do not start with a version field,
/// [`EnvelopeError::MissingField`] if it is absent.
pub fn envelope_version(bytes: &[u8]) -> Result<u64, EnvelopeError> {
    let mut r = Reader::new(bytes, &[8]);
    match r.next(9)? {
        Some((1, v)) => Ok(v.varint()?),
        _ => Err(EnvelopeError::MissingField("version")),
    }
}

pub(crate) fn fixed<'a, const N: usize>(
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

pub(crate) fn parse_sealed<V: Version>(
    bytes: &[u8],
    position: usize,
    expected: usize,
) -> Result<SealedPayloadView<'_, V>, EnvelopeError> {
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
            2 => {
                let b = v.bytes()?;
                enc = Some(V::encapped_key(b).ok_or(EnvelopeError::Length {
                    field: "encapsulated_key",
                    expected: core::mem::size_of::<V::EncappedKey>(),
                    actual: b.len(),
                })?);
            }
            _ => ct = Some(v.bytes()?),
        }
    }
    if party != position as u64 {
        return Err(EnvelopeError::PayloadParties);
    }
    let encapsulated_key = enc.ok_or(EnvelopeError::MissingField("encapsulated_key"))?;
    let ciphertext = ct.ok_or(EnvelopeError::MissingField("ciphertext"))?;
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
        parse_view(bytes)
    }
}

/// [`EnvelopeView::parse`] for any version.
pub(crate) fn parse_view<V: Version>(bytes: &[u8]) -> Result<EnvelopeView<'_, V>, EnvelopeError> {
    {
        if bytes.len() > V::MAX_LEN {
            return Err(EnvelopeError::Oversized {
                limit: V::MAX_LEN,
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
        let mut payloads: [Option<SealedPayloadView<'_, V>>; PARTIES] = [None; PARTIES];
        let mut count = 0;
        let mut signature = None;
        while let Some((field, v)) = r.next(9)? {
            match field {
                // The version decides every length after it: check it first.
                1 => match v.varint()? {
                    n if n == V::NUMBER as u64 => version = Some(n),
                    n => return Err(EnvelopeError::UnsupportedVersion(n)),
                },
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
                    // Field 2 comes first; without it the lengths are unknown.
                    let rid = RequestId(request_id.unwrap_or_default());
                    let expected = V::ciphertext_len(PartyId::ALL[count], &rid);
                    *slot = Some(parse_sealed::<V>(v.bytes()?, count, expected)?);
                    count += 1;
                }
                _ => signature = Some(*fixed::<SIGNATURE_BYTES>(v, "signature")?),
            }
        }
        if version.is_none() {
            return Err(EnvelopeError::MissingField("version"));
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
}

impl<'a, V: Version> EnvelopeView<'a, V> {
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
    pub fn payload(&self, party: PartyId) -> SealedPayloadView<'a, V> {
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
                self.payloads[i].encapsulated_key.as_ref(),
                self.payloads[i].ciphertext,
            )
        };
        digest(
            &V::header(&self.meta, &self.orb_key),
            [p(0), p(1), p(2)],
            V::BINDING,
        )
    }

    /// Verifies the orb's signature over the digest (strict Ed25519: no small-order keys,
    /// canonical signatures only).
    ///
    /// # Errors
    /// [`EnvelopeError::Signature`].
    pub fn verify_signature(&self) -> Result<(), EnvelopeError> {
        self.verified_digest().map(|_| ())
    }

    /// [`EnvelopeView::verify_signature`], returning the digest it checked: one pass over the
    /// envelope where a verifier also keeps the digest.
    ///
    /// # Errors
    /// [`EnvelopeError::Signature`].
    pub fn verified_digest(&self) -> Result<EnvelopeDigest, EnvelopeError> {
        let key = VerifyingKey::from_bytes(&self.orb_key).map_err(|_| EnvelopeError::Signature)?;
        let sig = Signature::from_bytes(&self.signature);
        let digest = self.digest();
        key.verify_strict(&digest.0, &sig)
            .map_err(|_| EnvelopeError::Signature)?;
        Ok(digest)
    }

    /// Re-encodes the envelope (canonically: for an envelope that parsed, the same bytes).
    ///
    /// # Errors
    /// [`EnvelopeError::BufferTooSmall`].
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EnvelopeError> {
        let n = V::envelope_len(&self.meta);
        let out = first(out, n)?;
        let layout = write_layout::<V>(out, &self.meta, &self.orb_key);
        for (p, payload) in self.payloads.iter().enumerate() {
            let e = layout.enc[p];
            let enc = payload.encapsulated_key.as_ref();
            out[e..e + enc.len()].copy_from_slice(enc);
            let c = layout.ct[p];
            out[c..c + payload.ciphertext.len()].copy_from_slice(payload.ciphertext);
        }
        out[layout.sig..layout.sig + SIGNATURE_BYTES].copy_from_slice(&self.signature);
        Ok(n)
    }
}
