//! `envelope_rejections`: envelopes a node must reject, with the exact error at each stage of
//! acceptance (parse, signature, open). Each is a patch over an accepted base envelope in the
//! same file, so the file stays small.

use serde::{Deserialize, Serialize};

use sdk_orb::envelope::{
    encode_payload, hazmat_seal_plaintexts, open_payload, payload_len, EnvelopeView,
    MAX_ENVELOPE_LEN,
};
use sdk_orb::keys::{NodePublicKeys, OrbSigningKey};
use sdk_orb::shamir::{CodeShare, MaskShare, PartyShares};
use sdk_orb::{PartyId, RequestType};

use crate::common::{party, random_template, rng, seed};
use crate::envelope::{
    apply, check_bases, diff, eye, patched, payload, request, Keys, Outcome, Patch, Request,
};
use crate::format::{expect_eq, Flag, Hex, Vector};
use crate::{Family, Sources};

/// The family.
#[derive(Debug)]
pub enum Spec {}

/// A rejection vector.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Case {
    /// An envelope every party accepts: it parses, its signature verifies and each party's
    /// payload opens.
    Base {
        /// The request it carries.
        request: Request,
        /// Node and orb keys.
        keys: Keys,
        /// The envelope.
        envelope: Hex,
    },
    /// The base envelope cut or zero-extended to `length`, then patched; opened by `party`
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
        /// `EnvelopeView::parse`.
        parse: Outcome,
        /// `verify_signature`; null if parsing fails.
        signature: Option<Outcome>,
        /// Opening `party`'s payload; null if parsing fails.
        open: Option<Outcome>,
    },
}

/// The stages run on `bytes` by `party` with `keys`.
fn stages(
    bytes: &[u8],
    p: u8,
    keys: &Keys,
) -> Result<(Outcome, Option<Outcome>, Option<Outcome>), String> {
    let k = keys.parse()?;
    let id = party(p)?;
    let view = match EnvelopeView::parse(bytes) {
        Ok(v) => v,
        Err(e) => return Ok((Outcome::of::<()>(&Err(e))?, None, None)),
    };
    let sig = Outcome::of(&view.verify_signature())?;
    let open = Outcome::of(&open_payload(&view, id, &k.secret[id.index()]))?;
    Ok((Outcome::Accept, Some(sig), Some(open)))
}

fn base_of(all: &[Vector<Case>], id: u32) -> Result<(&Keys, &Hex), String> {
    match all.get((id as usize).wrapping_sub(1)).map(|v| &v.case) {
        Some(Case::Base { keys, envelope, .. }) => Ok((keys, envelope)),
        _ => Err(format!("base {id} is not a base vector of this file")),
    }
}

struct Builder {
    keys: Keys,
    base: Vec<u8>,
    out: Vec<(String, Vec<Flag>, Case)>,
}

impl Builder {
    fn reject(
        &mut self,
        comment: &str,
        flags: Vec<Flag>,
        bytes: &[u8],
        p: u8,
    ) -> Result<(), String> {
        let (parse, signature, open) = stages(bytes, p, &self.keys)?;
        if parse == Outcome::Accept
            && signature == Some(Outcome::Accept)
            && open == Some(Outcome::Accept)
        {
            return Err(format!("{comment}: accepted"));
        }
        let (length, patches) = diff(&self.base, bytes);
        self.out.push((
            comment.to_string(),
            flags,
            Case::Reject {
                base: 1,
                length,
                patches,
                party: p,
                parse,
                signature,
                open,
            },
        ));
        Ok(())
    }

    fn patched(&self, at: usize, f: impl FnOnce(&mut u8)) -> Vec<u8> {
        patched(&self.base, at, f)
    }
}

pub(crate) fn offset_of(outer: &[u8], inner: &[u8]) -> usize {
    inner.as_ptr() as usize - outer.as_ptr() as usize
}

impl crate::Spec for Spec {
    type Case = Case;
    const FAMILY: Family = Family::EnvelopeRejections;
    const DESCRIPTION: &'static str = "Envelopes a node must reject, each a patch over the \
        accepted base envelope (vector 1), with the exact outcome of each acceptance stage: \
        parse (structure), signature, and opening one party's payload. Validly signed \
        envelopes with bad payloads come from hazmat_seal_plaintexts with the base's RNG \
        seed, so they differ from the base only where the payload does.";

    fn generate(_sources: &Sources) -> Result<Vec<Vector<Case>>, String> {
        let keys = Keys::derive("envelope_rejections");
        let k = keys.parse()?;
        let meta = request("envelope_rejections", RequestType::Reset, 77, false);
        // Real shares as payload plaintexts: seal, open, re-encode.
        let (l, r) = (
            random_template("envelope_rejections/left", 0.15),
            random_template("envelope_rejections/right", 0.15),
        );
        let shares_env = sdk_orb::envelope::seal_envelope_to_vec(
            &mut rng(&seed("envelope_rejections/shares")),
            &meta,
            &l,
            &r,
            &k.public,
            &k.orb,
        )
        .map_err(|e| e.to_string())?;
        let shares_view = EnvelopeView::parse(&shares_env).map_err(|e| e.to_string())?;
        let mut plaintexts = Vec::new();
        let mut shares = Vec::new();
        for party in PartyId::ALL {
            let s = open_payload(&shares_view, party, &k.secret[party.index()])
                .map_err(|e| e.to_string())?;
            let mut buf = vec![0u8; payload_len(party)];
            encode_payload(party, &meta.request_id, &s, &mut buf).map_err(|e| e.to_string())?;
            plaintexts.push(buf);
            shares.push(s);
        }
        let seal_seed = seed("envelope_rejections/seal");
        let seal = |pt: [&[u8]; 3], nodes: &NodePublicKeys| -> Result<Vec<u8>, String> {
            let mut out = vec![0u8; MAX_ENVELOPE_LEN];
            let n =
                hazmat_seal_plaintexts(&mut rng(&seal_seed), &meta, pt, nodes, &k.orb, &mut out)
                    .map_err(|e| e.to_string())?;
            out.truncate(n);
            Ok(out)
        };
        let base = seal([&plaintexts[0], &plaintexts[1], &plaintexts[2]], &k.public)?;
        for p in 0..3u8 {
            if stages(&base, p, &keys)?
                != (
                    Outcome::Accept,
                    Some(Outcome::Accept),
                    Some(Outcome::Accept),
                )
            {
                return Err(format!("base envelope not accepted by party {p}"));
            }
        }
        let mut b = Builder {
            keys: keys.clone(),
            base: base.clone(),
            out: vec![(
                "the base: a validly signed reset request every party opens".to_string(),
                vec![Flag::HazmatSealed],
                Case::Base {
                    request: Request::of(&meta),
                    keys: keys.clone(),
                    envelope: Hex(base.clone()),
                },
            )],
        };
        let bad = vec![Flag::Invalid, Flag::Tampered];
        let n = base.len();
        let view = EnvelopeView::parse(&base).map_err(|e| e.to_string())?;

        // Parse stage.
        b.reject("cut by one byte", bad.clone(), &base[..n - 1], 0)?;
        b.reject("empty", bad.clone(), &[], 0)?;
        let mut big = base.clone();
        big.resize(MAX_ENVELOPE_LEN + 1, 0);
        b.reject("longer than the largest envelope", bad.clone(), &big, 0)?;
        expect_eq("version field", &base[..2], &[0x08, 0x01][..])?;
        b.reject("version 2", bad.clone(), &b.patched(1, |v| *v = 2), 0)?;
        expect_eq("request type field", &base[20..22], &[0x18, 5][..])?;
        b.reject("request type 9", bad.clone(), &b.patched(21, |v| *v = 9), 0)?;
        b.reject(
            "a uniqueness request carrying a serial id",
            bad.clone(),
            &b.patched(21, |v| *v = 1),
            0,
        )?;
        let mut extra = base.clone();
        extra.extend_from_slice(&[0x50, 0x01]);
        b.reject("a trailing unknown field 10", bad.clone(), &extra, 0)?;
        let enc1 = offset_of(&base, view.payload(PartyId::ALL[1]).encapsulated_key);
        expect_eq(
            "party 1 field",
            &base[enc1 - 4..enc1],
            &[0x08, 0x01, 0x12, 0x20][..],
        )?;
        b.reject(
            "the second payload names party 2",
            bad.clone(),
            &b.patched(enc1 - 3, |v| *v = 2),
            0,
        )?;

        // Canonical encoding: an explicit zero scalar would give the same envelope a second
        // encoding (same digest, same signature).
        let ts_end = varint_end(&base, 23).ok_or("timestamp")?;
        expect_eq(
            "serial id field",
            &base[ts_end..ts_end + 2],
            &[0x28, 77][..],
        )?;
        let mut zero_serial = b.patched(21, |v| *v = 1);
        zero_serial[ts_end + 1] = 0;
        b.reject(
            "a uniqueness request with an explicit zero serial id",
            bad.clone(),
            &zero_serial,
            0,
        )?;
        let enc0 = offset_of(&base, view.payload(PartyId::ALL[0]).encapsulated_key);
        expect_eq(
            "party 0 payload start",
            &base[enc0 - 2..enc0],
            &[0x12, 0x20][..],
        )?;
        let tag0 = (0..enc0 - 2)
            .rev()
            .find(|&i| base[i] == 0x42 && varint_end(&base, i + 1) == Some(enc0 - 2))
            .ok_or("party 0's payload field")?;
        let (inner_len, _) = varint(&base[tag0 + 1..]).ok_or("payload length")?;
        let mut zero_party = base[..tag0].to_vec();
        zero_party.push(0x42);
        put_varint(&mut zero_party, inner_len + 2);
        zero_party.extend_from_slice(&[0x08, 0x00]);
        zero_party.extend_from_slice(&base[enc0 - 2..]);
        b.reject(
            "an explicit zero party id in party 0's payload",
            bad.clone(),
            &zero_party,
            0,
        )?;

        // Signature stage.
        b.reject(
            "a flipped signature bit (the payload still opens)",
            bad.clone(),
            &b.patched(n - 1, |v| *v ^= 1),
            0,
        )?;
        let ct1 = offset_of(&base, view.payload(PartyId::ALL[1]).ciphertext);
        b.reject(
            "a flipped bit in party 1's ciphertext",
            bad.clone(),
            &b.patched(ct1 + 1000, |v| *v ^= 0x10),
            1,
        )?;
        expect_eq("timestamp field", &base[22], &0x20)?;
        b.reject(
            "timestamp changed by one millisecond (header is the HPKE AAD)",
            bad.clone(),
            &b.patched(23, |v| *v ^= 1),
            2,
        )?;
        let orb_at = base
            .windows(34)
            .position(|w| w[..2] == [0x3a, 0x20] && w[2..] == view.orb_key())
            .ok_or("orb key field not found")?;
        let other = OrbSigningKey::from_bytes(&seed("envelope_rejections/other_orb"));
        let mut swapped = base.clone();
        swapped[orb_at + 2..orb_at + 34].copy_from_slice(&other.verifying_key().to_bytes());
        b.reject("another orb's key", bad.clone(), &swapped, 0)?;
        let mut small_order = base.clone();
        small_order[orb_at + 2..orb_at + 34].copy_from_slice(&{
            let mut id = [0u8; 32];
            id[0] = 1;
            id
        });
        b.reject(
            "orb key of small order (the identity point)",
            bad.clone(),
            &small_order,
            0,
        )?;

        // Open stage: validly signed, bad payloads.
        let signed = vec![Flag::HazmatSealed, Flag::Invalid, Flag::ValidSignature];
        let rid = meta.request_id.0;
        let bytes_of = |s: &PartyShares| -> (Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>) {
            let le = |v: &[u16]| v.iter().flat_map(|c| c.to_le_bytes()).collect::<Vec<u8>>();
            (
                le(&s.left.code.0),
                le(&s.left.mask.0),
                le(&s.right.code.0),
                le(&s.right.mask.0),
            )
        };
        let (lc, lm, rc, rm) = bytes_of(&shares[0]);
        let right0 = eye(Some(&rc), Some(&rm));
        let resized = payload(
            1,
            0,
            &rid,
            Some(&eye(
                Some(&lc[..CodeShare::BYTES - 2]),
                Some(&[&lm[..], &[0, 0]].concat()),
            )),
            Some(&right0),
        );
        let other_rid = payload(
            1,
            0,
            &[9; 16],
            Some(&eye(Some(&lc), Some(&lm))),
            Some(&right0),
        );
        let v2 = payload(2, 0, &rid, Some(&eye(Some(&lc), Some(&lm))), Some(&right0));
        let zeros = vec![0u8; payload_len(PartyId::ALL[0])];
        let (lc1, lm1, rc1, rm1) = bytes_of(&shares[1]);
        let names_2 = payload(
            1,
            2,
            &rid,
            Some(&eye(Some(&lc1), Some(&lm1))),
            Some(&eye(Some(&rc1), Some(&rm1))),
        );
        let p1 = &plaintexts[1][..];
        let p2 = &plaintexts[2][..];
        for (comment, pt, opener) in [
            (
                "party 0's code share 2 bytes short, its mask share 2 long",
                &resized,
                0u8,
            ),
            ("party 0's payload names another request id", &other_rid, 0),
            ("party 0's payload has version 2", &v2, 0),
            ("party 0's payload is all zero bytes", &zeros, 0),
        ] {
            expect_eq(comment, &pt.len(), &payload_len(PartyId::ALL[0]))?;
            let env = seal([pt, p1, p2], &k.public)?;
            b.reject(comment, signed.clone(), &env, opener)?;
        }
        expect_eq("names_2", &names_2.len(), &payload_len(PartyId::ALL[1]))?;
        let env = seal([&plaintexts[0], &names_2, p2], &k.public)?;
        b.reject("party 1's payload names party 2", signed.clone(), &env, 1)?;
        let wrong = NodePublicKeys([
            k.public.0[1].clone(),
            k.public.0[1].clone(),
            k.public.0[2].clone(),
        ]);
        let env = seal([&plaintexts[0], p1, p2], &wrong)?;
        b.reject(
            "party 0's payload sealed to party 1's key",
            signed.clone(),
            &env,
            0,
        )?;
        let _ = MaskShare::BYTES;
        Ok(Vector::numbered(b.out))
    }

    fn check_file(vectors: &[Vector<Case>]) -> Result<(), String> {
        check_bases(
            vectors,
            |c| match c {
                Case::Reject { base, .. } => Some(*base),
                Case::Base { .. } => None,
            },
            |c| matches!(c, Case::Base { .. }),
        )
    }

    fn verify(vector: &Vector<Case>, all: &[Vector<Case>]) -> Result<(), String> {
        match &vector.case {
            Case::Base {
                request,
                keys,
                envelope,
            } => {
                for p in 0..3 {
                    let got = stages(&envelope.0, p, keys)?;
                    expect_eq(
                        &format!("party {p}"),
                        &got,
                        &(
                            Outcome::Accept,
                            Some(Outcome::Accept),
                            Some(Outcome::Accept),
                        ),
                    )?;
                }
                let view = EnvelopeView::parse(&envelope.0).map_err(|e| e.to_string())?;
                expect_eq("request", &Request::of(view.meta()), request)
            }
            Case::Reject {
                base,
                length,
                patches,
                party: p,
                parse,
                signature,
                open,
            } => {
                let (keys, envelope) = base_of(all, *base)?;
                let bytes = apply(&envelope.0, *length, patches)?;
                let got = stages(&bytes, *p, keys)?;
                expect_eq("parse", &got.0, parse)?;
                expect_eq("signature", &got.1, signature)?;
                expect_eq("open", &got.2, open)?;
                if vector.flags.contains(&Flag::ValidSignature) {
                    expect_eq("valid signature", &got.1, &Some(Outcome::Accept))?;
                }
                Ok(())
            }
        }
    }
}

/// The value of the varint at the start of `b` and its length.
pub(crate) fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &x) in b.iter().enumerate().take(10) {
        v |= u64::from(x & 0x7f) << (7 * i);
        if x < 0x80 {
            return Some((v, i + 1));
        }
    }
    None
}

/// Where the varint starting at `at` ends.
pub(crate) fn varint_end(b: &[u8], at: usize) -> Option<usize> {
    varint(b.get(at..)?).map(|(_, n)| at + n)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}
