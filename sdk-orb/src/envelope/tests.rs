use super::*;
use crate::keys::{NodePublicKeys, NodeSecretKey, OrbSigningKey};
use crate::pb::{len_field_len, Writer};
use crate::plaintext::dot_products;
use crate::preprocess::{dot_shares, preprocess_code, preprocess_mask};
use crate::shamir::{code_coefs, reconstruct};
use crate::template::random;
use crate::template::IrisTemplate;
use crate::{PartyId, PartyShares, RequestId, RequestType, PARTIES};
use rand_chacha::ChaCha20Rng;
use rand_core::SeedableRng;
use std::boxed::Box;
use std::vec::Vec;

struct Fixture {
    rng: ChaCha20Rng,
    node_keys: [NodeSecretKey; PARTIES],
    public: NodePublicKeys,
    orb: OrbSigningKey,
    left: IrisTemplate,
    right: IrisTemplate,
}

fn fixture(seed: u64) -> Fixture {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let node_keys = [
        NodeSecretKey::generate(&mut rng),
        NodeSecretKey::generate(&mut rng),
        NodeSecretKey::generate(&mut rng),
    ];
    let public = NodePublicKeys(core::array::from_fn(|i| node_keys[i].public_key()));
    let orb = OrbSigningKey::generate(&mut rng);
    let left = random(&mut rng, 0.15);
    let right = random(&mut rng, 0.2);
    Fixture {
        rng,
        node_keys,
        public,
        orb,
        left,
        right,
    }
}

fn meta(request_type: RequestType, serial_id: u64) -> RequestMeta {
    RequestMeta {
        request_id: RequestId([7; 16]),
        request_type,
        timestamp_ms: 1_790_000_000_000,
        serial_id,
        or_policy: false,
    }
}

fn seal(f: &mut Fixture, m: &RequestMeta) -> Vec<u8> {
    // Garbage first, so bytes the sealer fails to write would show.
    let mut out = std::vec![0xA5u8; MAX_ENVELOPE_LEN + 3];
    let n = seal_envelope(
        &mut f.rng, m, &f.left, &f.right, &f.public, &f.orb, &mut out,
    )
    .expect("seals");
    assert_eq!(n, envelope_len(m));
    assert!(out[n..].iter().all(|&b| b == 0xA5));
    out.truncate(n);
    out
}

fn open(f: &Fixture, bytes: &[u8], party: PartyId) -> Result<Box<PartyShares>, EnvelopeError> {
    let view = EnvelopeView::parse(bytes)?;
    view.verify_signature()?;
    open_payload(&view, party, &f.node_keys[party.index()])
}

#[test]
fn sealed_envelopes_open_to_shares_of_both_eyes() {
    let mut f = fixture(40);
    let m = meta(RequestType::Uniqueness, 0);
    let bytes = seal(&mut f, &m);
    let view = EnvelopeView::parse(&bytes).expect("parses");
    view.verify_signature().expect("verifies");
    assert_eq!(view.meta(), &m);
    assert_eq!(view.orb_key(), f.orb.verifying_key().to_bytes());
    let shares: Vec<Box<PartyShares>> = PartyId::ALL
        .iter()
        .map(|&p| open(&f, &bytes, p).expect("opens"))
        .collect();
    for (eye, template) in [(0, &f.left), (1, &f.right)] {
        let pick = |s: &PartyShares| {
            if eye == 0 {
                s.left.clone()
            } else {
                s.right.clone()
            }
        };
        let (a, b) = (pick(&shares[0]), pick(&shares[2]));
        let mut plain = [0u16; crate::CODE_COEFS];
        reconstruct(
            (PartyId::ALL[0], &a.code.0),
            (PartyId::ALL[2], &b.code.0),
            &mut plain,
        );
        let mut expected = [0u16; crate::CODE_COEFS];
        code_coefs(template, &mut expected);
        assert!(plain == expected, "eye {eye}");
    }
    // The opened shares work as query and as database entry: left against right.
    let plain = dot_products(&f.left, &f.right);
    let (mut cd, mut md) = (0u16, 0u16);
    for party in PartyId::ALL {
        let s = &shares[party.index()];
        let (c, d) = dot_shares(
            &s.right.code,
            &s.right.mask,
            &preprocess_code(party, &s.left.code),
            &preprocess_mask(party, &s.left.mask),
        );
        cd = cd.wrapping_add(c);
        md = md.wrapping_add(d);
    }
    assert_eq!((cd, md), (plain.cd as u16, plain.md as u16));
}

#[test]
fn sealing_is_deterministic_for_a_seeded_rng() {
    let mut f = fixture(41);
    let m = meta(RequestType::Reset, 12);
    let mut a = f.rng.clone();
    let mut b = f.rng.clone();
    let mut x = std::vec![0u8; envelope_len(&m)];
    let mut y = std::vec![0u8; envelope_len(&m)];
    seal_envelope(&mut a, &m, &f.left, &f.right, &f.public, &f.orb, &mut x).expect("seals");
    seal_envelope(&mut b, &m, &f.left, &f.right, &f.public, &f.orb, &mut y).expect("seals");
    assert!(x == y);
    rand_core::RngCore::next_u64(&mut f.rng);
    let z = seal(&mut f, &m);
    assert!(x != z);
}

#[test]
fn every_request_type_round_trips_and_re_encodes_identically() {
    let mut f = fixture(42);
    for t in RequestType::ALL {
        for or_policy in [false, true] {
            let mut m = meta(t, if t.has_target() { 1 << 40 } else { 0 });
            m.or_policy = or_policy;
            let bytes = seal(&mut f, &m);
            assert!(bytes.len() <= MAX_ENVELOPE_LEN);
            let view = EnvelopeView::parse(&bytes).expect("parses");
            assert_eq!(view.meta(), &m);
            let mut again = std::vec![0u8; bytes.len()];
            assert_eq!(view.encode(&mut again), Ok(bytes.len()));
            assert!(again == bytes);
        }
    }
}

#[test]
fn sizes_are_as_documented() {
    assert_eq!(payload_len(PartyId::ALL[0]), 76_842);
    assert_eq!(payload_len(PartyId::ALL[1]), 76_844);
    assert_eq!(ciphertext_len(PartyId::ALL[2]), 76_860);
    let m = meta(RequestType::Uniqueness, 0);
    // 129 bytes of header fields and signature, then 76,900 + 76,904 + 76,904.
    assert_eq!(envelope_len(&m), 230_837);
    assert_eq!(MAX_ENVELOPE_LEN, 230_854);
}

#[test]
fn a_serial_id_must_fit_the_request_type() {
    let mut f = fixture(43);
    let mut out = std::vec![0u8; MAX_ENVELOPE_LEN];
    for (t, serial) in [(RequestType::Uniqueness, 5), (RequestType::Deletion, 0)] {
        let m = meta(t, serial);
        assert_eq!(
            seal_envelope(&mut f.rng, &m, &f.left, &f.right, &f.public, &f.orb, &mut out),
            Err(EnvelopeError::SerialId)
        );
    }
}

#[test]
fn a_short_buffer_is_caller_misuse() {
    let mut f = fixture(44);
    let m = meta(RequestType::Uniqueness, 0);
    let mut out = std::vec![0u8; envelope_len(&m) - 1];
    assert_eq!(
        seal_envelope(&mut f.rng, &m, &f.left, &f.right, &f.public, &f.orb, &mut out),
        Err(EnvelopeError::BufferTooSmall {
            needed: envelope_len(&m)
        })
    );
}

#[test]
fn another_partys_key_cannot_open_a_payload() {
    let mut f = fixture(45);
    let bytes = seal(&mut f, &meta(RequestType::Uniqueness, 0));
    let view = EnvelopeView::parse(&bytes).expect("parses");
    let mut out = Box::new(PartyShares::zero());
    let mut scratch = std::vec![0u8; MAX_ENVELOPE_LEN];
    for (party, key) in [(0usize, 1usize), (1, 2), (2, 0)] {
        assert_eq!(
            view.open_into(
                PartyId::ALL[party],
                &f.node_keys[key],
                &mut scratch,
                &mut out
            ),
            Err(EnvelopeError::Decryption)
        );
        assert!(*out == PartyShares::zero());
    }
}

#[test]
fn tampering_breaks_the_signature_and_decryption() {
    let mut f = fixture(46);
    let bytes = seal(&mut f, &meta(RequestType::Uniqueness, 0));
    let view = EnvelopeView::parse(&bytes).expect("parses");
    let ct_start =
        view.payload(PartyId::ALL[1]).ciphertext.as_ptr() as usize - bytes.as_ptr() as usize;
    // A flipped ciphertext bit: the signature fails; opening without it fails too.
    let mut flipped = bytes.clone();
    flipped[ct_start + 1000] ^= 0x10;
    let view = EnvelopeView::parse(&flipped).expect("still well-formed");
    assert_eq!(view.verify_signature(), Err(EnvelopeError::Signature));
    assert_eq!(
        open_payload(&view, PartyId::ALL[1], &f.node_keys[1]).err(),
        Some(EnvelopeError::Decryption)
    );
    // A changed header field (the timestamp): signature and AAD both fail.
    let mut m = *EnvelopeView::parse(&bytes).expect("parses").meta();
    m.timestamp_ms += 1;
    let mut resigned = std::vec![0u8; envelope_len(&m)];
    let view = EnvelopeView::parse(&bytes).expect("parses");
    let moved = EnvelopeView { meta: m, ..view };
    let n = moved.encode(&mut resigned).expect("fits");
    let view = EnvelopeView::parse(&resigned[..n]).expect("parses");
    assert_eq!(view.verify_signature(), Err(EnvelopeError::Signature));
    assert_eq!(
        open_payload(&view, PartyId::ALL[0], &f.node_keys[0]).err(),
        Some(EnvelopeError::Decryption)
    );
    // A flipped signature bit.
    let mut sig = bytes.clone();
    let last = sig.len() - 1;
    sig[last] ^= 1;
    assert_eq!(
        EnvelopeView::parse(&sig)
            .expect("parses")
            .verify_signature(),
        Err(EnvelopeError::Signature)
    );
}

#[test]
fn structural_errors_are_specific() {
    let mut f = fixture(47);
    let bytes = seal(&mut f, &meta(RequestType::Uniqueness, 0));
    // Truncated anywhere: malformed or missing, never a panic.
    for cut in [0usize, 1, 5, 100, bytes.len() / 2, bytes.len() - 1] {
        let e = EnvelopeView::parse(&bytes[..cut]).err();
        assert!(
            matches!(
                e,
                Some(EnvelopeError::Malformed(_)) | Some(EnvelopeError::MissingField(_))
            ),
            "cut {cut}: {e:?}"
        );
    }
    assert_eq!(
        EnvelopeView::parse(&bytes[..bytes.len() - 1]).err(),
        Some(EnvelopeError::Malformed("truncated protobuf"))
    );
    // Oversized.
    let mut big = bytes.clone();
    big.resize(MAX_ENVELOPE_LEN + 1, 0);
    assert_eq!(
        EnvelopeView::parse(&big).err(),
        Some(EnvelopeError::Oversized {
            limit: MAX_ENVELOPE_LEN,
            actual: MAX_ENVELOPE_LEN + 1
        })
    );
    // Version 2 in the first field (0x08 0x01 -> 0x08 0x02).
    let mut v2 = bytes.clone();
    assert_eq!(&v2[..2], &[0x08, 0x01]);
    v2[1] = 2;
    assert_eq!(
        EnvelopeView::parse(&v2).err(),
        Some(EnvelopeError::UnsupportedVersion(2))
    );
    // Unknown request type 9 (field 3 follows the 18-byte request id field).
    let mut t = bytes.clone();
    assert_eq!(t[20], 0x18);
    t[21] = 9;
    assert_eq!(
        EnvelopeView::parse(&t).err(),
        Some(EnvelopeError::UnknownRequestType(9))
    );
    // A trailing unknown field.
    let mut extra = bytes.clone();
    extra.extend_from_slice(&[0x50, 0x01]);
    assert_eq!(
        EnvelopeView::parse(&extra).err(),
        Some(EnvelopeError::Malformed("unknown protobuf field"))
    );
    // Garbage.
    assert!(EnvelopeView::parse(b"\xff\xff\xff\xff").is_err());
}

fn encode_eye_fields(w: &mut Writer<'_>, field: u8, code_len: usize, mask_len: usize) {
    w.len_prefix(field, len_field_len(code_len) + len_field_len(mask_len));
    w.reserve(1, code_len);
    w.reserve(2, mask_len);
}

/// A payload for `party` with the given share lengths and header values.
fn payload_bytes(party: u8, request_id: [u8; 16], code_len: usize, mask_len: usize) -> Vec<u8> {
    let mut buf = std::vec![0u8; 200_000];
    let mut w = Writer::new(&mut buf);
    w.uint(1, 1);
    w.uint(2, party as u64);
    w.bytes(3, &request_id);
    encode_eye_fields(&mut w, 4, code_len, mask_len);
    encode_eye_fields(&mut w, 5, CODE_BYTES, MASK_BYTES);
    let n = w.pos;
    buf.truncate(n);
    buf
}

#[test]
fn signed_envelopes_with_bad_payloads_are_rejected_after_decryption() {
    let mut f = fixture(48);
    let m = meta(RequestType::Uniqueness, 0);
    let good: Vec<Vec<u8>> = (0..3u8)
        .map(|p| payload_bytes(p, m.request_id.0, CODE_BYTES, MASK_BYTES))
        .collect();
    let cases: [(Vec<u8>, EnvelopeError); 3] = [
        // Same total length, shares of the wrong sizes.
        (
            payload_bytes(0, m.request_id.0, CODE_BYTES - 2, MASK_BYTES + 2),
            EnvelopeError::ShareLength {
                field: "left.code",
                expected: CODE_BYTES,
                actual: CODE_BYTES - 2,
            },
        ),
        // Party 1's payload put in party 0's slot needs 2 more bytes; use another request id.
        (
            payload_bytes(0, [9; 16], CODE_BYTES, MASK_BYTES),
            EnvelopeError::PayloadRequestId,
        ),
        (good[0].clone(), EnvelopeError::Decryption),
    ];
    for (i, (bad, expected)) in cases.iter().enumerate() {
        let mut out = std::vec![0u8; MAX_ENVELOPE_LEN];
        let n = hazmat_seal_plaintexts(
            &mut f.rng,
            &m,
            [bad, &good[1], &good[2]],
            &f.public,
            &f.orb,
            &mut out,
        )
        .expect("seals");
        let mut bytes = out[..n].to_vec();
        if *expected == EnvelopeError::Decryption {
            // Swap party 0's ciphertext for party 2's encapsulated key: wrong key material.
            let view = EnvelopeView::parse(&bytes).expect("parses");
            let enc2 = *view.payload(PartyId::ALL[2]).encapsulated_key;
            let at = view.payload(PartyId::ALL[0]).encapsulated_key.as_ptr() as usize
                - bytes.as_ptr() as usize;
            bytes[at..at + 32].copy_from_slice(&enc2);
        }
        let view = EnvelopeView::parse(&bytes).expect("parses");
        if *expected != EnvelopeError::Decryption {
            view.verify_signature().expect("validly signed");
        }
        assert_eq!(
            open_payload(&view, PartyId::ALL[0], &f.node_keys[0]).err(),
            Some(*expected),
            "case {i}"
        );
        assert!(open_payload(&view, PartyId::ALL[1], &f.node_keys[1]).is_ok());
    }
}

#[test]
fn payload_decoding_errors_are_specific() {
    let rid = RequestId([3; 16]);
    let p1 = PartyId::ALL[1];
    let mut out = Box::new(PartyShares::zero());
    let good = payload_bytes(1, rid.0, CODE_BYTES, MASK_BYTES);
    assert_eq!(decode_payload(&good, p1, &rid, &mut out), Ok(()));
    assert_eq!(
        decode_payload(&good, PartyId::ALL[2], &rid, &mut out),
        Err(EnvelopeError::PayloadParty {
            expected: 2,
            actual: 1
        })
    );
    let short_mask = payload_bytes(1, rid.0, CODE_BYTES, MASK_BYTES - 1);
    assert_eq!(
        decode_payload(&short_mask, p1, &rid, &mut out),
        Err(EnvelopeError::ShareLength {
            field: "left.mask",
            expected: MASK_BYTES,
            actual: MASK_BYTES - 1
        })
    );
    // Without the right eye (cut at the start of field 5).
    let left_only_len = good.len() - len_field_len(EYE_INNER);
    assert_eq!(
        decode_payload(&good[..left_only_len], p1, &rid, &mut out),
        Err(EnvelopeError::MissingField("right"))
    );
    let mut v3 = good.clone();
    v3[1] = 3;
    assert_eq!(
        decode_payload(&v3, p1, &rid, &mut out),
        Err(EnvelopeError::UnsupportedVersion(3))
    );
    // encode_payload writes exactly what decode_payload reads.
    let mut shares = Box::new(PartyShares::zero());
    shares.left.code.0[5] = 77;
    shares.right.mask.0[6399] = 0xBEEF;
    let mut buf = std::vec![0xA5u8; payload_len(p1) + 1];
    assert_eq!(
        encode_payload(p1, &rid, &shares, &mut buf),
        Ok(payload_len(p1))
    );
    assert_eq!(buf[payload_len(p1)], 0xA5);
    decode_payload(&buf[..payload_len(p1)], p1, &rid, &mut out).expect("decodes");
    assert!(*out == *shares);
}

#[test]
fn fuzz_entry_points_accept_real_inputs() {
    let mut f = fixture(49);
    let bytes = seal(&mut f, &meta(RequestType::Reauth, 3));
    crate::fuzzing::envelope(&bytes);
    crate::fuzzing::payload(&payload_bytes(0, [0; 16], CODE_BYTES, MASK_BYTES));
    let mut json = std::vec![0u8; f.left.json_len()];
    f.left.to_open_iris_json(&mut json).expect("fits");
    crate::fuzzing::template_json(&json);
}
