//! Parsing an envelope's structure, its digest and signature, and re-encoding it.

use ed25519_dalek::{Signature, VerifyingKey};

use crate::keys::KEY_BYTES;
use crate::pb::{Reader, Value};
use crate::{PartyId, RequestId, RequestType, PARTIES, PROTOCOL_VERSION};

use super::format::*;

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
    pub(crate) meta: RequestMeta,
    pub(crate) orb_key: [u8; KEY_BYTES],
    pub(crate) payloads: [SealedPayloadView<'a>; PARTIES],
    pub(crate) signature: [u8; SIGNATURE_BYTES],
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

pub(crate) fn parse_sealed(
    bytes: &[u8],
    position: usize,
) -> Result<SealedPayloadView<'_>, EnvelopeError> {
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
            return Err(EnvelopeError::Oversized {
                limit: MAX_ENVELOPE_LEN,
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
}
