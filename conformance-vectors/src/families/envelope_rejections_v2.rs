//! `envelope_rejections_v2`: version 2 envelopes a node must reject, with the exact error at
//! each stage of acceptance (parse, signature, open) and the reason the node's intake gives
//! under a stated envelope-version setting. Each is a patch over an accepted base envelope
//! sealed by `seal_envelope_v2`, whose seeded party is party 2, so that edits of party 2's
//! short payload move only the bytes after it.

use ed25519_dalek::Signer;
use rand_core::RngCore;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use sdk_orb::envelope::v2::{
    hazmat_seal_plaintexts_v2, open_payload_v2, seal_envelope_v2_to_vec, MAX_ENVELOPE_LEN_V2,
};
use sdk_orb::envelope::{envelope_version, EnvelopeError, EnvelopeView, MAX_ENVELOPE_LEN, V2};
use sdk_orb::keys::OrbSigningKey;
use sdk_orb::shamir::seeded::seeded_party;
use sdk_orb::shamir::PartyShares;
use sdk_orb::{PartyId, RequestId, RequestType};

use super::envelope_rejections::{offset_of, varint};
use super::envelope_sealing_v2::{request_for, HybridKeys};
use super::payload_rejections_v2::seeded;
use crate::common::{party, random_template, rng, seed};
use crate::envelope::{apply, diff, eye, payload, Outcome, Patch, Pb, Request};
use crate::format::{expect_bytes, expect_eq, Flag, Hex, Vector};
use crate::{Family, Sources};

/// The family.
#[derive(Debug)]
pub enum Spec {}

/// The envelope versions a node accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeVersions {
    /// An X-Wing key, and version 1 still accepted.
    Both,
    /// An X-Wing key, version 1 refused (`envelope.refuse_v1`).
    V2Only,
    /// No X-Wing key (`keys.hpke_hybrid_secret` unset): version 1 only.
    V1Only,
}

/// A rejection vector.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Case {
    /// An envelope every party accepts, under `both` and `v2_only`.
    Base {
        /// The request it carries.
        request: Request,
        /// Node X-Wing keys and the orb key.
        keys: HybridKeys,
        /// The envelope.
        envelope: Hex,
        /// Per party, SHA-256 of its opened shares: left code, left mask, right code, right
        /// mask, each coefficient a little-endian u16 (the seeded party's expanded from its
        /// seed).
        opened_sha256: Vec<Hex>,
    },
    /// The base envelope cut or zero-extended to `length`, then patched; taken in by `party`
    /// with the base's keys.
    Reject {
        /// Id of a `base` vector in this file.
        base: u32,
        /// Bytes of the input.
        length: usize,
        /// Bytes overwritten after resizing.
        patches: Vec<Patch>,
        /// The party that opens.
        party: u8,
        /// The node's envelope-version setting, for `intake`.
        node: NodeVersions,
        /// `EnvelopeView::parse_v2`.
        parse: Outcome,
        /// `verify_signature`; null if parsing fails.
        signature: Option<Outcome>,
        /// `open_payload_v2` of `party`'s payload; null if parsing fails.
        open: Option<Outcome>,
        /// The node's intake: `accept` or its rejection reason.
        intake: String,
    },
}

type Stages = (Outcome, Option<Outcome>, Option<Outcome>);

/// The SDK's stages on `bytes` for party `p`.
fn stages(bytes: &[u8], p: u8, keys: &HybridKeys) -> Result<Stages, String> {
    let (secret, _, _) = keys.parse()?;
    let id = party(p)?;
    let view = match EnvelopeView::parse_v2(bytes) {
        Ok(v) => v,
        Err(e) => return Ok((Outcome::of::<()>(&Err(e))?, None, None)),
    };
    let sig = Outcome::of(&view.verify_signature())?;
    let open = Outcome::of(&open_payload_v2(&view, id, &secret[id.index()]))?;
    Ok((Outcome::Accept, Some(sig), Some(open)))
}

/// The node's rejection reason for an SDK error (its `ocelli-reject-reason`).
fn reason(e: EnvelopeError) -> Result<&'static str, String> {
    Ok(match e {
        EnvelopeError::Malformed(_) | EnvelopeError::MissingField(_) => "malformed",
        EnvelopeError::Oversized { .. } => "oversized",
        EnvelopeError::ShareLength { .. } => "bad_shares",
        EnvelopeError::Length { .. } => "bad_length",
        EnvelopeError::UnsupportedVersion(_) => "unsupported_version",
        EnvelopeError::UnknownRequestType(_) | EnvelopeError::SerialId => "invalid_request",
        EnvelopeError::PayloadParties | EnvelopeError::PayloadParty { .. } => "wrong_party",
        EnvelopeError::Signature => "bad_signature",
        EnvelopeError::Decryption => "decryption_failed",
        EnvelopeError::PayloadRequestId => "request_id_mismatch",
        other => return Err(format!("not an input rejection: {other:?}")),
    })
}

/// The node's intake on `bytes` for party `p`, in its order: size (the node's default limit,
/// the largest version 1 envelope), the version setting, structure, orb key allow-list (the
/// base's orb key), signature, opening. Capture time and request log pass.
fn intake(bytes: &[u8], p: u8, node: NodeVersions, keys: &HybridKeys) -> Result<String, String> {
    let rejected = |e| reason(e).map(str::to_string);
    if bytes.len() > MAX_ENVELOPE_LEN {
        return Ok("oversized".to_string());
    }
    let version = envelope_version(bytes);
    if version != Ok(2) {
        if version == Ok(1) && node == NodeVersions::V2Only {
            return Ok("version1_refused".to_string());
        }
        return match EnvelopeView::parse(bytes) {
            Err(e) => rejected(e),
            Ok(_) => Err("a version 1 envelope that parses: not in this family".to_string()),
        };
    }
    if node == NodeVersions::V1Only {
        return Ok("unsupported_version".to_string());
    }
    let view = match EnvelopeView::parse_v2(bytes) {
        Ok(v) => v,
        Err(e) => return rejected(e),
    };
    if view.orb_key()[..] != keys.orb_public_key.0[..] {
        return Ok("unknown_orb_key".to_string());
    }
    if let Err(e) = view.verify_signature() {
        return rejected(e);
    }
    let (secret, _, _) = keys.parse()?;
    let id = party(p)?;
    match open_payload_v2(&view, id, &secret[id.index()]) {
        Ok(_) => Ok("accept".to_string()),
        Err(e) => rejected(e),
    }
}

/// SHA-256 of opened shares, coefficients as little-endian u16.
fn shares_sha256(s: &PartyShares) -> Hex {
    let mut h = Sha256::new();
    for eye in [&s.left, &s.right] {
        for c in eye.code.0.iter().chain(eye.mask.0.iter()) {
            h.update(c.to_le_bytes());
        }
    }
    Hex(h.finalize().to_vec())
}

fn opened_sha256(bytes: &[u8], keys: &HybridKeys) -> Result<Vec<Hex>, String> {
    let (secret, _, _) = keys.parse()?;
    let view = EnvelopeView::parse_v2(bytes).map_err(|e| e.to_string())?;
    PartyId::ALL
        .iter()
        .map(|&p| {
            open_payload_v2(&view, p, &secret[p.index()])
                .map(|s| shares_sha256(&s))
                .map_err(|e| e.to_string())
        })
        .collect()
}

fn base_of(all: &[Vector<Case>], id: u32) -> Result<(&HybridKeys, &Hex), String> {
    match all.get((id as usize).wrapping_sub(1)).map(|v| &v.case) {
        Some(Case::Base { keys, envelope, .. }) => Ok((keys, envelope)),
        _ => Err(format!("base {id} is not a base vector of this file")),
    }
}

/// A top-level protobuf field: where its tag, its content and the field end.
struct Field {
    number: u64,
    start: usize,
    content: usize,
    end: usize,
}

/// The fields of `b` (varint and length-delimited only).
fn fields(b: &[u8]) -> Result<Vec<Field>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < b.len() {
        let (tag, n) = varint(&b[at..]).ok_or("tag")?;
        let content = at + n;
        let (content, end) = match tag & 7 {
            0 => (content, content + varint(&b[content..]).ok_or("varint")?.1),
            2 => {
                let (len, m) = varint(&b[content..]).ok_or("length")?;
                (content + m, content + m + len as usize)
            }
            t => return Err(format!("wire type {t}")),
        };
        out.push(Field {
            number: tag >> 3,
            start: at,
            content,
            end,
        });
        at = end;
    }
    Ok(out)
}

/// `b` with the field `f` replaced by the length-delimited field `number` holding `content`.
fn replace(b: &[u8], f: &Field, number: u8, content: &[u8]) -> Vec<u8> {
    let mut out = b[..f.start].to_vec();
    out.extend_from_slice(&Pb::default().bytes(number, content).0);
    out.extend_from_slice(&b[f.end..]);
    out
}

/// The digest formula over a parsed version 2 envelope with another header.
fn digest_with_header(view: &EnvelopeView<'_, V2>, header: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(header);
    for p in PartyId::ALL {
        let s = view.payload(p);
        h.update([p.get()]);
        h.update(s.encapsulated_key);
        h.update((s.ciphertext.len() as u32).to_be_bytes());
        h.update(s.ciphertext);
    }
    h.finalize().into()
}

struct Builder {
    keys: HybridKeys,
    orb: [u8; 32],
    base: Vec<u8>,
    out: Vec<(String, Vec<Flag>, Case)>,
}

impl Builder {
    fn reject(
        &mut self,
        comment: &str,
        flags: &[Flag],
        bytes: &[u8],
        p: u8,
        node: NodeVersions,
    ) -> Result<(), String> {
        let (parse, signature, open) = stages(bytes, p, &self.keys)?;
        let intake = intake(bytes, p, node, &self.keys)?;
        if intake == "accept" {
            return Err(format!("{comment}: the node accepts it"));
        }
        if flags.contains(&Flag::ValidSignature) && signature != Some(Outcome::Accept) {
            return Err(format!("{comment}: the signature does not verify"));
        }
        let (length, mut patches) = diff(&self.base, bytes);
        // Resizing zero-extends: trailing zeros past the base need no patch.
        if let Some(tail) = patches.last_mut().filter(|t| t.offset == self.base.len()) {
            let nonzero = tail
                .bytes
                .0
                .iter()
                .rposition(|&x| x != 0)
                .map_or(0, |i| i + 1);
            tail.bytes.0.truncate(nonzero);
        }
        patches.retain(|t| !t.bytes.0.is_empty());
        self.out.push((
            comment.to_string(),
            flags.to_vec(),
            Case::Reject {
                base: 1,
                length,
                patches,
                party: p,
                node,
                parse,
                signature,
                open,
                intake,
            },
        ));
        Ok(())
    }

    fn patched(&self, at: usize, f: impl FnOnce(&mut u8)) -> Vec<u8> {
        let mut b = self.base.clone();
        f(&mut b[at]);
        b
    }

    /// `bytes` with the signature replaced by the orb's over `digest`.
    fn signed(&self, mut bytes: Vec<u8>, digest: &[u8]) -> Vec<u8> {
        let key = ed25519_dalek::SigningKey::from_bytes(&self.orb);
        let n = bytes.len();
        bytes[n - 64..].copy_from_slice(&key.sign(digest).to_bytes());
        bytes
    }

    /// `bytes` signed again over their own digest.
    fn resigned(&self, bytes: Vec<u8>) -> Result<Vec<u8>, String> {
        let digest = EnvelopeView::parse_v2(&bytes)
            .map_err(|e| e.to_string())?
            .digest();
        Ok(self.signed(bytes, &digest.0))
    }
}

/// The name of a top-level envelope field.
fn field_name(number: u64, slot: usize) -> String {
    match number {
        1 => "version".to_string(),
        2 => "request_id".to_string(),
        3 => "request_type".to_string(),
        4 => "timestamp_ms".to_string(),
        5 => "serial_id".to_string(),
        6 => "or_policy".to_string(),
        7 => "orb_key".to_string(),
        8 => format!("payload of party {slot}"),
        _ => "signature".to_string(),
    }
}

impl crate::Spec for Spec {
    type Case = Case;
    const FAMILY: Family = Family::EnvelopeRejectionsV2;
    const DESCRIPTION: &'static str = "Version 2 envelopes a node must reject, each a patch over \
        the accepted base envelope (vector 1, sealed by seal_envelope_v2, party 2 seeded), \
        with the exact outcome of each acceptance stage (parse_v2, signature, opening one \
        party's payload with its X-Wing key) and the node intake's rejection reason under the \
        stated envelope-version setting. Validly signed defects are re-signed with the orb key \
        or sealed with hazmat_seal_plaintexts_v2 with the base's RNG stream after the share \
        seed, so they differ from the base only where the defect is.";

    fn generate(_sources: &Sources) -> Result<Vec<Vector<Case>>, String> {
        let keys = HybridKeys::derive("envelope_rejections_v2");
        let (secret, public, orb) = keys.parse()?;
        let orb_seed = keys.orb_secret_key.array::<32>("orb_secret_key")?;
        let request = request_for(
            "envelope_rejections_v2",
            PartyId::ALL[2],
            RequestType::Uniqueness,
            0,
            false,
        );
        let meta = request.meta()?;
        let rid = meta.request_id.0;
        let (l, r) = (
            random_template("envelope_rejections_v2/left", 0.15),
            random_template("envelope_rejections_v2/right", 0.15),
        );
        let rng_seed = seed("envelope_rejections_v2/seal");
        let base = seal_envelope_v2_to_vec(&mut rng(&rng_seed), &meta, &l, &r, &public, &orb)
            .map_err(|e| e.to_string())?;
        let view = EnvelopeView::parse_v2(&base).map_err(|e| e.to_string())?;
        expect_eq("seeded party", &view.seeded_party(), &PartyId::ALL[2])?;
        for p in 0..3u8 {
            for node in [NodeVersions::Both, NodeVersions::V2Only] {
                expect_eq(
                    &format!("base, party {p}, {node:?}"),
                    &(stages(&base, p, &keys)?, intake(&base, p, node, &keys)?),
                    &(
                        (
                            Outcome::Accept,
                            Some(Outcome::Accept),
                            Some(Outcome::Accept),
                        ),
                        "accept".to_string(),
                    ),
                )?;
            }
        }

        // The plaintexts again, for payload defects: the two share payloads re-encoded from
        // the opened shares, the seed from the RNG stream; sealing them with the stream after
        // the seed gives the base back.
        let mut stream = rng(&rng_seed);
        let mut share_seed = [0u8; 32];
        stream.fill_bytes(&mut share_seed);
        let mut plaintexts = Vec::new();
        for p in PartyId::ALL {
            let s = open_payload_v2(&view, p, &secret[p.index()]).map_err(|e| e.to_string())?;
            let le = |v: &[u16]| v.iter().flat_map(|c| c.to_le_bytes()).collect::<Vec<u8>>();
            let eye_of =
                |e: &sdk_orb::shamir::EyeShares| eye(Some(&le(&e.code.0)), Some(&le(&e.mask.0)));
            plaintexts.push(if p == PartyId::ALL[2] {
                seeded(2, &rid, None, Some(&share_seed))
            } else {
                payload(
                    2,
                    u64::from(p.get()),
                    &rid,
                    Some(&eye_of(&s.left)),
                    Some(&eye_of(&s.right)),
                )
            });
        }
        let seal = |seeded_pt: &[u8]| -> Result<Vec<u8>, String> {
            let mut after_seed = stream.clone();
            let mut out = vec![0u8; base.len()];
            let n = hazmat_seal_plaintexts_v2(
                &mut after_seed,
                &meta,
                [&plaintexts[0], &plaintexts[1], seeded_pt],
                &public,
                &orb,
                &mut out,
            )
            .map_err(|e| e.to_string())?;
            out.truncate(n);
            Ok(out)
        };
        expect_bytes("hazmat reseal of the base", &seal(&plaintexts[2])?, &base)?;

        let mut b = Builder {
            keys: keys.clone(),
            orb: orb_seed,
            base: base.clone(),
            out: vec![(
                "the base: a uniqueness request every party opens, party 2 seeded".to_string(),
                vec![Flag::Synthetic],
                Case::Base {
                    request,
                    keys: keys.clone(),
                    envelope: Hex(base.clone()),
                    opened_sha256: opened_sha256(&base, &keys)?,
                },
            )],
        };
        let bad = [Flag::Invalid, Flag::Tampered];
        let signed = [Flag::Invalid, Flag::Tampered, Flag::ValidSignature];
        let sealed = [Flag::HazmatSealed, Flag::Invalid, Flag::ValidSignature];
        use NodeVersions::{Both, V1Only, V2Only};
        let n = base.len();
        let top = fields(&base)?;
        let slots: Vec<&Field> = top.iter().filter(|f| f.number == 8).collect();
        let enc_at = |p: usize| offset_of(&base, view.payload(PartyId::ALL[p]).encapsulated_key);
        let ct_at = |p: usize| offset_of(&base, view.payload(PartyId::ALL[p]).ciphertext);

        // The version setting and size.
        b.reject(
            "a node without an X-Wing key refuses version 2",
            &[Flag::Invalid],
            &base,
            0,
            V1Only,
        )?;
        expect_eq("version field", &base[..2], &[0x08, 0x02][..])?;
        let v1 = b.patched(1, |v| *v = 1);
        b.reject(
            "version 1 in the version field, the node refusing version 1",
            &bad,
            &v1,
            0,
            V2Only,
        )?;
        b.reject(
            "version 1 in the version field, the node accepting version 1",
            &bad,
            &v1,
            0,
            Both,
        )?;
        b.reject("version 3", &bad, &b.patched(1, |v| *v = 3), 0, Both)?;
        let mut big = base.clone();
        big.resize(MAX_ENVELOPE_LEN_V2 + 1, 0);
        b.reject(
            "longer than the largest version 2 envelope",
            &bad,
            &big,
            0,
            Both,
        )?;
        let mut huge = base.clone();
        huge.resize(MAX_ENVELOPE_LEN + 1, 0);
        b.reject(
            "longer than the node's limit, the largest version 1 envelope",
            &bad,
            &huge,
            0,
            Both,
        )?;

        // Truncations at each field boundary.
        b.reject("empty", &bad, &[], 0, Both)?;
        let mut slot = 0;
        for f in &top {
            if f.end == n {
                continue;
            }
            let name = field_name(f.number, slot);
            slot += usize::from(f.number == 8);
            b.reject(
                &format!("cut after the {name} field"),
                &bad,
                &base[..f.end],
                0,
                Both,
            )?;
        }
        b.reject(
            "cut inside party 0's encapsulated key",
            &bad,
            &base[..enc_at(0) + 560],
            0,
            Both,
        )?;
        b.reject(
            "cut inside party 1's ciphertext",
            &bad,
            &base[..ct_at(1) + 1000],
            1,
            Both,
        )?;
        b.reject("cut by one byte", &bad, &base[..n - 1], 0, Both)?;

        // The X-Wing encapsulated key: its length, and decapsulations that fail.
        let slot2 = slots[2];
        let p2 = view.payload(PartyId::ALL[2]);
        let inner = |enc: &[u8], ct: &[u8]| {
            let mut pb = Pb::default();
            pb.uint(1, 2).bytes(2, enc).bytes(3, ct);
            pb.0
        };
        expect_bytes(
            "party 2's payload re-encoded",
            &replace(&base, slot2, 8, &inner(p2.encapsulated_key, p2.ciphertext)),
            &base,
        )?;
        b.reject(
            "party 2's encapsulated key one byte short",
            &bad,
            &replace(
                &base,
                slot2,
                8,
                &inner(&p2.encapsulated_key[..1119], p2.ciphertext),
            ),
            2,
            Both,
        )?;
        b.reject(
            "party 2's encapsulated key of version 1's length (32 bytes)",
            &bad,
            &replace(
                &base,
                slot2,
                8,
                &inner(&p2.encapsulated_key[1088..], p2.ciphertext),
            ),
            2,
            Both,
        )?;
        let e0 = enc_at(0);
        b.reject(
            "a flipped bit in party 0's ML-KEM ciphertext (re-signed)",
            &signed,
            &b.resigned(b.patched(e0 + 100, |v| *v ^= 0x01))?,
            0,
            Both,
        )?;
        let mut zero_x = base.clone();
        zero_x[e0 + 1088..e0 + 1120].fill(0);
        b.reject(
            "party 0's X25519 ciphertext all zero (re-signed)",
            &signed,
            &b.resigned(zero_x)?,
            0,
            Both,
        )?;
        let e1 = enc_at(1);
        let mut swapped_enc = base.clone();
        swapped_enc.copy_within(e1..e1 + 1120, e0);
        swapped_enc[e1..e1 + 1120].copy_from_slice(&base[e0..e0 + 1120]);
        b.reject(
            "the encapsulated keys of parties 0 and 1 swapped (re-signed)",
            &signed,
            &b.resigned(swapped_enc)?,
            0,
            Both,
        )?;

        // The seeded party's short payload.
        let mut long_ct = p2.ciphertext.to_vec();
        long_ct.push(0);
        b.reject(
            "the seeded party's ciphertext one byte long",
            &bad,
            &replace(&base, slot2, 8, &inner(p2.encapsulated_key, &long_ct)),
            2,
            Both,
        )?;
        let mut other_rid = RequestId(rid);
        other_rid.0[15] = other_rid.0[15].wrapping_add(1);
        expect_eq(
            "seeded party of the changed request id",
            &seeded_party(&other_rid),
            &PartyId::ALL[0],
        )?;
        expect_eq("request id field", &base[2..4], &[0x12, 0x10][..])?;
        b.reject(
            "a request id whose seeded party is 0: the ciphertext lengths no longer fit",
            &bad,
            &b.patched(4 + 15, |v| *v = other_rid.0[15]),
            0,
            Both,
        )?;
        let c2 = ct_at(2);
        let flipped_seed = b.patched(c2 + 40, |v| *v ^= 0x04);
        b.reject(
            "a flipped bit in the seed's ciphertext",
            &bad,
            &flipped_seed,
            2,
            Both,
        )?;
        b.reject(
            "a flipped bit in the seed's ciphertext (re-signed)",
            &signed,
            &b.resigned(flipped_seed)?,
            2,
            Both,
        )?;
        let seed_len = plaintexts[2].len();
        let mut in_eye = Pb::default();
        in_eye
            .uint(1, 2)
            .uint(2, 2)
            .bytes(3, &rid)
            .bytes(4, &share_seed);
        let mut v1_seed = plaintexts[2].clone();
        expect_eq("payload version field", &v1_seed[..2], &[0x08, 0x02][..])?;
        v1_seed[1] = 1;
        for (comment, pt) in [
            (
                "the seeded payload names party 1",
                seeded(1, &rid, None, Some(&share_seed)),
            ),
            (
                "the seeded payload names another request id",
                seeded(2, &[0x55; 16], None, Some(&share_seed)),
            ),
            ("the seeded payload has version 1", v1_seed),
            ("the seed in field 4, a share payload's left eye", in_eye.0),
        ] {
            expect_eq(comment, &pt.len(), &seed_len)?;
            b.reject(comment, &sealed, &seal(&pt)?, 2, Both)?;
        }

        // Signatures over other digests, and the header they cover.
        b.reject(
            "a flipped signature bit (the payload still opens)",
            &bad,
            &b.patched(n - 1, |v| *v ^= 1),
            0,
            Both,
        )?;
        let v1_digest = digest_with_header(&view, &meta.header(&view.orb_key()));
        b.reject(
            "signed over the digest with version 1's header",
            &bad,
            &b.signed(base.clone(), &v1_digest),
            0,
            Both,
        )?;
        expect_eq("timestamp field", &base[22], &0x20)?;
        let later = b.patched(23, |v| *v ^= 1);
        b.reject(
            "timestamp changed by one millisecond",
            &bad,
            &later,
            1,
            Both,
        )?;
        b.reject(
            "timestamp changed by one millisecond (re-signed: the header is the HPKE AAD)",
            &signed,
            &b.resigned(later)?,
            1,
            Both,
        )?;
        let orb_at = top
            .iter()
            .find(|f| f.number == 7)
            .ok_or("orb key field")?
            .content;
        let other_seed = seed("envelope_rejections_v2/other_orb");
        let other = OrbSigningKey::from_bytes(&other_seed);
        let mut other_orb = base.clone();
        other_orb[orb_at..orb_at + 32].copy_from_slice(&other.verifying_key().to_bytes());
        let digest = EnvelopeView::parse_v2(&other_orb)
            .map_err(|e| e.to_string())?
            .digest();
        let key = ed25519_dalek::SigningKey::from_bytes(&other_seed);
        let n_other = other_orb.len();
        other_orb[n_other - 64..].copy_from_slice(&key.sign(&digest.0).to_bytes());
        b.reject(
            "another orb's key, signed by that orb",
            &signed,
            &other_orb,
            0,
            Both,
        )?;

        // Party slots.
        expect_eq(
            "party 2 field",
            &base[slot2.content..slot2.content + 2],
            &[0x08, 0x02][..],
        )?;
        b.reject(
            "party 2's slot labelled party 1",
            &bad,
            &b.patched(slot2.content + 1, |v| *v = 1),
            0,
            Both,
        )?;
        let (s1, s2) = (slots[1], slots[2]);
        let mut swapped = base[..s1.start].to_vec();
        swapped.extend_from_slice(&base[s2.start..s2.end]);
        swapped.extend_from_slice(&base[s1.start..s1.end]);
        swapped.extend_from_slice(&base[s2.end..]);
        b.reject(
            "the payloads of parties 1 and 2 in swapped slots",
            &bad,
            &swapped,
            1,
            Both,
        )?;
        Ok(Vector::numbered(b.out))
    }

    fn check_file(vectors: &[Vector<Case>]) -> Result<(), String> {
        for v in vectors {
            if let Case::Reject { base, .. } = &v.case {
                base_of(vectors, *base).map_err(|e| format!("vector {}: {e}", v.id))?;
            }
        }
        Ok(())
    }

    fn verify(vector: &Vector<Case>, all: &[Vector<Case>]) -> Result<(), String> {
        match &vector.case {
            Case::Base {
                request,
                keys,
                envelope,
                opened_sha256: hashes,
            } => {
                for p in 0..3 {
                    for node in [NodeVersions::Both, NodeVersions::V2Only] {
                        let got = (
                            stages(&envelope.0, p, keys)?,
                            intake(&envelope.0, p, node, keys)?,
                        );
                        expect_eq(
                            &format!("party {p}, {node:?}"),
                            &got,
                            &(
                                (
                                    Outcome::Accept,
                                    Some(Outcome::Accept),
                                    Some(Outcome::Accept),
                                ),
                                "accept".to_string(),
                            ),
                        )?;
                    }
                }
                expect_eq("opened_sha256", &opened_sha256(&envelope.0, keys)?, hashes)?;
                let view = EnvelopeView::parse_v2(&envelope.0).map_err(|e| e.to_string())?;
                expect_eq("request", &Request::of(view.meta()), request)
            }
            Case::Reject {
                base,
                length,
                patches,
                party: p,
                node,
                parse,
                signature,
                open,
                intake: reason,
            } => {
                let (keys, envelope) = base_of(all, *base)?;
                let bytes = apply(&envelope.0, *length, patches)?;
                let got = stages(&bytes, *p, keys)?;
                expect_eq("parse", &got.0, parse)?;
                expect_eq("signature", &got.1, signature)?;
                expect_eq("open", &got.2, open)?;
                expect_eq("intake", &intake(&bytes, *p, *node, keys)?, reason)?;
                if vector.flags.contains(&Flag::ValidSignature) {
                    expect_eq("valid signature", &got.1, &Some(Outcome::Accept))?;
                }
                Ok(())
            }
        }
    }
}

/// The bytes of `vector` (a base's envelope, or a rejection's patched input), and for a
/// rejection its party, node setting and expected intake reason: what a node-side replay
/// needs.
///
/// # Errors
/// A dangling base or a patch past the length.
pub fn input(vector: &Vector<Case>, all: &[Vector<Case>]) -> Result<Vec<u8>, String> {
    match &vector.case {
        Case::Base { envelope, .. } => Ok(envelope.0.clone()),
        Case::Reject {
            base,
            length,
            patches,
            ..
        } => apply(&base_of(all, *base)?.1 .0, *length, patches),
    }
}
