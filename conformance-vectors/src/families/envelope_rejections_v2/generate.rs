//! The generator: the base envelope and each defect made from it.

use ed25519_dalek::Signer;
use rand_core::RngCore;

use sdk_orb::envelope::v2::{
    hazmat_seal_plaintexts_v2, open_payload_v2, seal_envelope_v2_to_vec, MAX_ENVELOPE_LEN_V2,
};
use sdk_orb::envelope::{EnvelopeView, RequestMeta, MAX_ENVELOPE_LEN};
use sdk_orb::keys::OrbSigningKey;
use sdk_orb::shamir::seeded::seeded_party;
use sdk_orb::{PartyId, RequestType};

use super::super::envelope_sealing_v2::{request_for, HybridKeys};
use super::super::payload_rejections_v2::seeded;
use super::parts::{field_name, Parts};
use super::NodeVersions::{self, Both, V1Only, V2Only};
use super::{accepted_everywhere, intake, opened_sha256, stages, Case};
use crate::common::{random_template, rng, seed};
use crate::envelope::{diff, digest_with_header, eye, patched, payload, Binding, Outcome, Pb};
use crate::format::{expect_bytes, expect_eq, Flag, Hex, Vector};

pub(super) fn vectors() -> Result<Vec<Vector<Case>>, String> {
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
    accepted_everywhere(&base, &keys).map_err(|e| format!("base: {e}"))?;

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
    let x = Parts::of(&base)?;
    versions_and_sizes(&mut b, &x)?;
    truncations(&mut b, &x)?;
    encapsulated_keys(&mut b, &x)?;
    seeded_payload(&mut b, &x)?;
    seeded_plaintexts(&mut b, &rid, &share_seed, &plaintexts[2], seal)?;
    signatures(&mut b, &x, &meta)?;
    slots(&mut b, &x)?;
    Ok(Vector::numbered(b.out))
}

/// The version settings and sizes.
fn versions_and_sizes(b: &mut Builder, x: &Parts<'_>) -> Result<(), String> {
    let base = x.base;
    b.reject(
        "a node without an X-Wing key refuses version 2",
        &[Flag::Invalid],
        base,
        0,
        V1Only,
    )?;
    expect_eq("version field", &base[..2], &[0x08, 0x02][..])?;
    let v1 = b.patched(1, |v| *v = 1);
    b.reject(
        "version 1 in the version field, the node refusing version 1",
        &BAD,
        &v1,
        0,
        V2Only,
    )?;
    b.reject(
        "version 1 in the version field, the node accepting version 1",
        &BAD,
        &v1,
        0,
        Both,
    )?;
    b.reject("version 3", &BAD, &b.patched(1, |v| *v = 3), 0, Both)?;
    let mut big = base.to_vec();
    big.resize(MAX_ENVELOPE_LEN_V2 + 1, 0);
    b.reject(
        "longer than the largest version 2 envelope",
        &BAD,
        &big,
        0,
        Both,
    )?;
    let mut huge = base.to_vec();
    huge.resize(MAX_ENVELOPE_LEN + 1, 0);
    b.reject(
        "longer than the node's limit, the largest version 1 envelope",
        &BAD,
        &huge,
        0,
        Both,
    )?;

    Ok(())
}

/// Cuts at each field boundary and inside the long fields.
fn truncations(b: &mut Builder, x: &Parts<'_>) -> Result<(), String> {
    let base = x.base;
    b.reject("empty", &BAD, &[], 0, Both)?;
    let mut slot = 0;
    for f in &x.top {
        if f.end == base.len() {
            continue;
        }
        let name = field_name(f.number, slot);
        slot += usize::from(f.number == 8);
        b.reject(
            &format!("cut after the {name} field"),
            &BAD,
            &base[..f.end],
            0,
            Both,
        )?;
    }
    b.reject(
        "cut inside party 0's encapsulated key",
        &BAD,
        &base[..x.enc_at(0) + 560],
        0,
        Both,
    )?;
    b.reject(
        "cut inside party 1's ciphertext",
        &BAD,
        &base[..x.ct_at(1) + 1000],
        1,
        Both,
    )?;
    b.reject("cut by one byte", &BAD, &base[..base.len() - 1], 0, Both)?;

    Ok(())
}

/// The X-Wing encapsulated key: its length, and decapsulations that fail.
fn encapsulated_keys(b: &mut Builder, x: &Parts<'_>) -> Result<(), String> {
    let base = x.base;
    let p2 = x.view.payload(PartyId::ALL[2]);
    expect_bytes(
        "party 2's payload re-encoded",
        &x.with_payload2(p2.encapsulated_key, p2.ciphertext),
        base,
    )?;
    b.reject(
        "party 2's encapsulated key one byte short",
        &BAD,
        &x.with_payload2(&p2.encapsulated_key[..1119], p2.ciphertext),
        2,
        Both,
    )?;
    b.reject(
        "party 2's encapsulated key of version 1's length (32 bytes)",
        &BAD,
        &x.with_payload2(&p2.encapsulated_key[1088..], p2.ciphertext),
        2,
        Both,
    )?;
    let e0 = x.enc_at(0);
    b.reject(
        "a flipped bit in party 0's ML-KEM ciphertext (re-signed)",
        &SIGNED,
        &b.resigned(b.patched(e0 + 100, |v| *v ^= 0x01))?,
        0,
        Both,
    )?;
    let mut zero_x = base.to_vec();
    zero_x[e0 + 1088..e0 + 1120].fill(0);
    b.reject(
        "party 0's X25519 ciphertext all zero (re-signed)",
        &SIGNED,
        &b.resigned(zero_x)?,
        0,
        Both,
    )?;
    let e1 = x.enc_at(1);
    let mut swapped_enc = base.to_vec();
    swapped_enc.copy_within(e1..e1 + 1120, e0);
    swapped_enc[e1..e1 + 1120].copy_from_slice(&base[e0..e0 + 1120]);
    b.reject(
        "the encapsulated keys of parties 0 and 1 swapped (re-signed)",
        &SIGNED,
        &b.resigned(swapped_enc)?,
        0,
        Both,
    )?;

    Ok(())
}

/// The seeded party's short payload: its length, its ciphertext.
fn seeded_payload(b: &mut Builder, x: &Parts<'_>) -> Result<(), String> {
    let base = x.base;
    let p2 = x.view.payload(PartyId::ALL[2]);
    let mut long_ct = p2.ciphertext.to_vec();
    long_ct.push(0);
    b.reject(
        "the seeded party's ciphertext one byte long",
        &BAD,
        &x.with_payload2(p2.encapsulated_key, &long_ct),
        2,
        Both,
    )?;
    let mut other_rid = x.view.request_id();
    other_rid.0[15] = other_rid.0[15].wrapping_add(1);
    expect_eq(
        "seeded party of the changed request id",
        &seeded_party(&other_rid),
        &PartyId::ALL[0],
    )?;
    expect_eq("request id field", &base[2..4], &[0x12, 0x10][..])?;
    b.reject(
        "a request id whose seeded party is 0: the ciphertext lengths no longer fit",
        &BAD,
        &b.patched(4 + 15, |v| *v = other_rid.0[15]),
        0,
        Both,
    )?;
    let c2 = x.ct_at(2);
    // The digest binds a version 2 ciphertext through its tag: a changed ciphertext keeps the
    // signature and fails HPKE, a changed tag fails both.
    b.reject(
        "a flipped bit in the seed's ciphertext (the signature still holds)",
        &SIGNED,
        &b.patched(c2 + 40, |v| *v ^= 0x04),
        2,
        Both,
    )?;
    let tag2 = c2 + x.view.payload(PartyId::ALL[2]).ciphertext.len() - 1;
    let flipped_tag = b.patched(tag2, |v| *v ^= 0x04);
    b.reject(
        "a flipped bit in the seed's tag",
        &BAD,
        &flipped_tag,
        2,
        Both,
    )?;
    b.reject(
        "a flipped bit in the seed's tag (re-signed)",
        &SIGNED,
        &b.resigned(flipped_tag)?,
        2,
        Both,
    )?;
    Ok(())
}

/// Seeded payloads with one defect each, sealed with the base's stream.
fn seeded_plaintexts(
    b: &mut Builder,
    rid: &[u8; 16],
    share_seed: &[u8; 32],
    good: &[u8],
    seal: impl Fn(&[u8]) -> Result<Vec<u8>, String>,
) -> Result<(), String> {
    let seed_len = good.len();
    let mut in_eye = Pb::default();
    in_eye
        .uint(1, 2)
        .uint(2, 2)
        .bytes(3, rid)
        .bytes(4, share_seed);
    let mut v1_seed = good.to_vec();
    expect_eq("payload version field", &v1_seed[..2], &[0x08, 0x02][..])?;
    v1_seed[1] = 1;
    for (comment, pt) in [
        (
            "the seeded payload names party 1",
            seeded(1, rid, None, Some(share_seed)),
        ),
        (
            "the seeded payload names another request id",
            seeded(2, &[0x55; 16], None, Some(share_seed)),
        ),
        ("the seeded payload has version 1", v1_seed),
        ("the seed in field 4, a share payload's left eye", in_eye.0),
    ] {
        expect_eq(comment, &pt.len(), &seed_len)?;
        b.reject(comment, &SEALED, &seal(&pt)?, 2, Both)?;
    }

    Ok(())
}

/// Signatures over other digests, and the header they cover.
fn signatures(b: &mut Builder, x: &Parts<'_>, meta: &RequestMeta) -> Result<(), String> {
    let base = x.base;
    b.reject(
        "a flipped signature bit (the payload still opens)",
        &BAD,
        &b.patched(base.len() - 1, |v| *v ^= 1),
        0,
        Both,
    )?;
    let v1_digest = digest_with_header(&x.view, &meta.header(&x.view.orb_key()), Binding::Tag);
    b.reject(
        "signed over the digest with version 1's header",
        &BAD,
        &b.signed(base.to_vec(), &v1_digest),
        0,
        Both,
    )?;
    let whole = digest_with_header(&x.view, &meta.header_v2(&x.view.orb_key()), Binding::Whole);
    b.reject(
        "signed over version 1's digest of whole ciphertexts, with version 2's header",
        &BAD,
        &b.signed(base.to_vec(), &whole),
        0,
        Both,
    )?;
    expect_eq("timestamp field", &base[22], &0x20)?;
    let later = b.patched(23, |v| *v ^= 1);
    b.reject(
        "timestamp changed by one millisecond",
        &BAD,
        &later,
        1,
        Both,
    )?;
    b.reject(
        "timestamp changed by one millisecond (re-signed: the header is the HPKE AAD)",
        &SIGNED,
        &b.resigned(later)?,
        1,
        Both,
    )?;
    let orb_at = x
        .top
        .iter()
        .find(|f| f.number == 7)
        .ok_or("orb key field")?
        .content;
    let other_seed = seed("envelope_rejections_v2/other_orb");
    let other = OrbSigningKey::from_bytes(&other_seed);
    let mut other_orb = base.to_vec();
    other_orb[orb_at..orb_at + 32].copy_from_slice(&other.verifying_key().to_bytes());
    let digest = EnvelopeView::parse_v2(&other_orb)
        .map_err(|e| e.to_string())?
        .digest();
    let key = ed25519_dalek::SigningKey::from_bytes(&other_seed);
    let n_other = other_orb.len();
    other_orb[n_other - 64..].copy_from_slice(&key.sign(&digest.0).to_bytes());
    b.reject(
        "another orb's key, signed by that orb",
        &SIGNED,
        &other_orb,
        0,
        Both,
    )?;

    Ok(())
}

/// Party slots out of place.
fn slots(b: &mut Builder, x: &Parts<'_>) -> Result<(), String> {
    let base = x.base;
    let slot2 = x.slot(2);
    expect_eq(
        "party 2 field",
        &base[slot2.content..slot2.content + 2],
        &[0x08, 0x02][..],
    )?;
    b.reject(
        "party 2's slot labelled party 1",
        &BAD,
        &b.patched(slot2.content + 1, |v| *v = 1),
        0,
        Both,
    )?;
    let (s1, s2) = (x.slot(1), x.slot(2));
    let mut swapped = base[..s1.start].to_vec();
    swapped.extend_from_slice(&base[s2.start..s2.end]);
    swapped.extend_from_slice(&base[s1.start..s1.end]);
    swapped.extend_from_slice(&base[s2.end..]);
    b.reject(
        "the payloads of parties 1 and 2 in swapped slots",
        &BAD,
        &swapped,
        1,
        Both,
    )?;
    Ok(())
}

const BAD: [Flag; 2] = [Flag::Invalid, Flag::Tampered];
const SIGNED: [Flag; 3] = [Flag::Invalid, Flag::Tampered, Flag::ValidSignature];
const SEALED: [Flag; 3] = [Flag::HazmatSealed, Flag::Invalid, Flag::ValidSignature];

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
        patched(&self.base, at, f)
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
